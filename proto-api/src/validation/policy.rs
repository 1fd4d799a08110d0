//! Validation of PropagationPolicy and ClusterPropagationPolicy: every rule of Karmada's
//! policy webhook (docs/semantics.md §6.4) plus Flotilla's own (Part 1): application
//! failover needs `propagateDeps`, cluster failover may carry a grace period, weights are at
//! least 1, seconds are not negative.

use std::collections::BTreeSet;

use super::meta::validate_object_meta;
use super::{push_reasons, validate_label_selector, FieldError, Path};
use crate::names;
use crate::policy::{
    ApplicationFailoverBehavior, ClusterAffinity, ClusterFailoverBehavior,
    ClusterPropagationPolicy, FailoverBehavior, Placement, Preemption, PropagationPolicy,
    PropagationSpec, ReplicaDivisionPreference, ReplicaSchedulingType, SpreadByField,
    SpreadConstraint, StatePreservation, Toleration, TolerationOperator, CPP_PERMANENT_ID_LABEL,
    FIELD_SELECTOR_KEYS, PP_PERMANENT_ID_LABEL,
};
use crate::selector::NodeSelectorOperator;

/// Longest `affinityName`.
const AFFINITY_NAME_MAX: usize = 32;

/// Validates a (defaulted) PropagationPolicy; `old` is the stored object on update.
pub fn validate_propagation_policy(
    new: &PropagationPolicy,
    old: Option<&PropagationPolicy>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, true, names::dns1123_subdomain, &mut errs);
    validate_permanent_id(
        PP_PERMANENT_ID_LABEL,
        &new.metadata,
        old.map(|o| &o.metadata),
        &mut errs,
    );
    validate_spec(
        &new.spec,
        old.map(|o| &o.spec),
        Some(&new.metadata.namespace),
        &mut errs,
    );
    errs
}

/// Validates a (defaulted) ClusterPropagationPolicy; `old` is the stored object on update.
pub fn validate_cluster_propagation_policy(
    new: &ClusterPropagationPolicy,
    old: Option<&ClusterPropagationPolicy>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_object_meta(&new.metadata, false, names::dns1123_subdomain, &mut errs);
    validate_permanent_id(
        CPP_PERMANENT_ID_LABEL,
        &new.metadata,
        old.map(|o| &o.metadata),
        &mut errs,
    );
    validate_spec(&new.spec, old.map(|o| &o.spec), None, &mut errs);
    errs
}

fn validate_permanent_id(
    label: &str,
    new: &crate::meta::ObjectMeta,
    old: Option<&crate::meta::ObjectMeta>,
    errs: &mut Vec<FieldError>,
) {
    let path = Path::new("metadata").child("labels").key(label);
    match (new.label(label), old.and_then(|o| o.label(label))) {
        (None, None) if old.is_none() => errs.push(FieldError::required(
            &path,
            "the permanent-id label is required (it is defaulted from metadata.uid, which the \
             server assigns on create)",
        )),
        (new_id, Some(old_id)) if new_id != Some(old_id) => errs.push(FieldError::forbidden(
            &path,
            "the permanent-id label should not be updated",
        )),
        _ => {}
    }
}

fn validate_spec(
    spec: &PropagationSpec,
    old: Option<&PropagationSpec>,
    policy_namespace: Option<&str>,
    errs: &mut Vec<FieldError>,
) {
    let path = Path::new("spec");
    if let Some(old) = old {
        if old.scheduler_name != spec.scheduler_name {
            errs.push(FieldError::forbidden(
                &path.child("schedulerName"),
                "the schedulerName should not be updated",
            ));
        }
    }
    validate_resource_selectors(spec, policy_namespace, &path, errs);
    validate_placement(&spec.placement, &path.child("placement"), errs);
    if let Some(failover) = &spec.failover {
        validate_failover(failover, spec.propagate_deps, &path, errs);
    }
    if let Some(s) = &spec.suspension {
        let on_clusters = s
            .dispatching_on_clusters
            .as_ref()
            .is_some_and(|c| !c.cluster_names.is_empty());
        if s.dispatching == Some(true) && on_clusters {
            errs.push(FieldError::invalid(
                &path.child("suspension"),
                "dispatching: true",
                "suspension dispatching cannot co-exist with dispatchingOnClusters.clusterNames",
            ));
        }
    }
}

fn validate_resource_selectors(
    spec: &PropagationSpec,
    policy_namespace: Option<&str>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let rs_path = path.child("resourceSelectors");
    if spec.resource_selectors.is_empty() {
        errs.push(FieldError::required(
            &rs_path,
            "at least one resource selector is required",
        ));
    }
    for (i, rs) in spec.resource_selectors.iter().enumerate() {
        let p = rs_path.index(i);
        if rs.api_version.is_empty() {
            errs.push(FieldError::required(
                &p.child("apiVersion"),
                "apiVersion is required",
            ));
        }
        if rs.kind.is_empty() {
            errs.push(FieldError::required(&p.child("kind"), "kind is required"));
        }
        if let Some(ns) = policy_namespace {
            if rs.namespace != ns {
                errs.push(FieldError::invalid(
                    &p.child("namespace"),
                    &rs.namespace,
                    format!(
                        "the namespace of a resource selector must be the policy's namespace \
                         ({ns})"
                    ),
                ));
            }
        }
        if let Some(sel) = &rs.label_selector {
            validate_label_selector(sel, &p.child("labelSelector"), errs);
        }
        if spec.preemption == Some(Preemption::Always) && rs.name.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("name"),
                "",
                "name cannot be empty if preemption is Always, the empty name may cause \
                 unexpected resources preemption",
            ));
        }
    }
}

fn validate_placement(placement: &Placement, path: &Path, errs: &mut Vec<FieldError>) {
    if placement.cluster_affinity.is_some() && !placement.cluster_affinities.is_empty() {
        errs.push(FieldError::invalid(
            path,
            "clusterAffinity and clusterAffinities",
            "clusterAffinities cannot co-exist with clusterAffinity",
        ));
    }
    if let Some(aff) = &placement.cluster_affinity {
        validate_cluster_affinity(aff, &path.child("clusterAffinity"), errs);
    }
    validate_affinity_terms(placement, &path.child("clusterAffinities"), errs);
    validate_tolerations(
        &placement.cluster_tolerations,
        &path.child("clusterTolerations"),
        errs,
    );
    validate_spread_constraints(
        &placement.spread_constraints,
        &path.child("spreadConstraints"),
        errs,
    );
    if let Some(rs) = &placement.replica_scheduling {
        if let Some(wp) = &rs.weight_preference {
            let p = path
                .child("replicaScheduling")
                .child("weightPreference")
                .child("staticWeightList");
            for (i, w) in wp.static_weight_list.iter().enumerate() {
                if w.weight < 1 {
                    errs.push(FieldError::invalid(
                        &p.index(i).child("weight"),
                        w.weight,
                        "must be greater than or equal to 1",
                    ));
                }
            }
        }
    }
    if let Some(wa) = &placement.workload_affinity {
        let p = path.child("workloadAffinity");
        let terms = [
            ("affinity", wa.affinity.as_ref()),
            ("antiAffinity", wa.anti_affinity.as_ref()),
        ];
        for (name, term) in terms {
            if let Some(term) = term {
                let kp = p.child(name).child("groupByLabelKey");
                if term.group_by_label_key.is_empty() {
                    errs.push(FieldError::required(&kp, "groupByLabelKey is required"));
                } else {
                    push_reasons(
                        errs,
                        &kp,
                        &term.group_by_label_key,
                        names::qualified_name(&term.group_by_label_key),
                    );
                }
            }
        }
        if let (Some(a), Some(b)) = (&wa.affinity, &wa.anti_affinity) {
            if !a.group_by_label_key.is_empty() && a.group_by_label_key == b.group_by_label_key {
                errs.push(FieldError::invalid(
                    &p.child("antiAffinity").child("groupByLabelKey"),
                    &b.group_by_label_key,
                    "affinity and antiAffinity cannot use the same groupByLabelKey",
                ));
            }
        }
    }
}

pub(super) fn validate_cluster_affinity(
    aff: &ClusterAffinity,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    if let Some(sel) = &aff.label_selector {
        validate_label_selector(sel, &path.child("labelSelector"), errs);
    }
    if let Some(fs) = &aff.field_selector {
        for (i, e) in fs.match_expressions.iter().enumerate() {
            let p = path
                .child("fieldSelector")
                .child("matchExpressions")
                .index(i);
            if !FIELD_SELECTOR_KEYS.contains(&e.key.as_str()) {
                errs.push(FieldError::invalid(
                    &p.child("key"),
                    &e.key,
                    format!(
                        "unsupported key \"{}\", must be provider, region, or zone",
                        e.key
                    ),
                ));
            }
            if !matches!(
                e.operator,
                NodeSelectorOperator::In | NodeSelectorOperator::NotIn
            ) {
                errs.push(FieldError::invalid(
                    &p.child("operator"),
                    format!("{:?}", e.operator),
                    format!(
                        "unsupported operator \"{:?}\", must be In or NotIn",
                        e.operator
                    ),
                ));
            }
        }
    }
}

fn validate_affinity_name(name: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if name.is_empty() {
        errs.push(FieldError::required(path, "affinityName is required"));
        return;
    }
    if name.len() > AFFINITY_NAME_MAX {
        errs.push(FieldError::too_long(path, name, AFFINITY_NAME_MAX));
    }
    push_reasons(errs, path, name, names::qualified_name(name));
}

fn validate_affinity_terms(placement: &Placement, path: &Path, errs: &mut Vec<FieldError>) {
    let overflow_allowed = placement.replica_scheduling.as_ref().is_some_and(|rs| {
        rs.replica_scheduling_type == Some(ReplicaSchedulingType::Divided)
            && match rs.replica_division_preference {
                Some(ReplicaDivisionPreference::Aggregated) => true,
                Some(ReplicaDivisionPreference::Weighted) => rs
                    .weight_preference
                    .as_ref()
                    .is_some_and(|w| w.dynamic_weight.is_some()),
                None => false,
            }
    });
    let mut seen = BTreeSet::new();
    let mut check_unique = |name: &str, p: &Path, errs: &mut Vec<FieldError>| {
        if !name.is_empty() && !seen.insert(name.to_string()) {
            errs.push(FieldError::invalid(
                p,
                name,
                "each affinity term in a policy must have a unique name",
            ));
        }
    };
    for (i, term) in placement.cluster_affinities.iter().enumerate() {
        let p = path.index(i);
        validate_affinity_name(&term.affinity_name, &p.child("affinityName"), errs);
        check_unique(&term.affinity_name, &p.child("affinityName"), errs);
        validate_cluster_affinity(&term.affinity(), &p, errs);
        if term.overflow_affinities.is_empty() {
            continue;
        }
        let op = p.child("overflowAffinities");
        if !overflow_allowed {
            errs.push(FieldError::invalid(
                &op,
                "overflowAffinities",
                "overflowAffinities can only be used together with dynamic weight or aggregated \
                 scheduling",
            ));
        }
        if term.affinity().is_empty() {
            errs.push(FieldError::invalid(
                &op,
                "overflowAffinities",
                "overflowAffinities can only be used together with an inline cluster affinity \
                 on the same term",
            ));
        }
        for (j, o) in term.overflow_affinities.iter().enumerate() {
            let q = op.index(j);
            validate_affinity_name(&o.affinity_name, &q.child("affinityName"), errs);
            check_unique(&o.affinity_name, &q.child("affinityName"), errs);
            validate_cluster_affinity(&o.affinity(), &q, errs);
        }
    }
}

fn validate_spread_constraints(
    constraints: &[SpreadConstraint],
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let mut fields: BTreeSet<SpreadByField> = BTreeSet::new();
    for (i, c) in constraints.iter().enumerate() {
        let p = path.index(i);
        if c.spread_by_field.is_some() && !c.spread_by_label.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("spreadByLabel"),
                &c.spread_by_label,
                "spreadByLabel should not co-exist with spreadByField",
            ));
        }
        if !c.spread_by_label.is_empty() {
            push_reasons(
                errs,
                &p.child("spreadByLabel"),
                &c.spread_by_label,
                names::qualified_name(&c.spread_by_label),
            );
        }
        if c.min_groups < 0 {
            errs.push(FieldError::invalid(
                &p.child("minGroups"),
                c.min_groups,
                "minGroups lower than 0 is not allowed",
            ));
        }
        if c.max_groups < 0 {
            errs.push(FieldError::invalid(
                &p.child("maxGroups"),
                c.max_groups,
                "maxGroups lower than 0 is not allowed",
            ));
        }
        if c.max_groups > 0 && c.max_groups < c.min_groups {
            errs.push(FieldError::invalid(
                &p.child("maxGroups"),
                c.max_groups,
                "maxGroups lower than minGroups is not allowed",
            ));
        }
        if let Some(f) = c.spread_by_field {
            if !fields.insert(f) {
                errs.push(FieldError::invalid(
                    &p.child("spreadByField"),
                    f.as_str(),
                    format!("multiple {} spread constraints are not allowed", f.as_str()),
                ));
            }
        }
    }
    if !fields.is_empty() && !fields.contains(&SpreadByField::Cluster) {
        errs.push(FieldError::invalid(
            path,
            "spreadConstraints",
            "the cluster spread constraint must be enabled in one of the constraints in case of \
             SpreadByField is enabled",
        ));
    }
}

fn validate_tolerations(tolerations: &[Toleration], path: &Path, errs: &mut Vec<FieldError>) {
    for (i, t) in tolerations.iter().enumerate() {
        let p = path.index(i);
        if !t.key.is_empty() {
            push_reasons(errs, &p.child("key"), &t.key, names::qualified_name(&t.key));
        }
        match t.operator {
            Some(TolerationOperator::Lt) | Some(TolerationOperator::Gt) => {
                errs.push(FieldError::not_supported(
                    &p.child("operator"),
                    t.operator.map_or("", |o| o.as_str()),
                    &["Equal", "Exists"],
                ));
            }
            Some(TolerationOperator::Exists) => {
                if !t.value.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("value"),
                        &t.value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            None | Some(TolerationOperator::Equal) => {
                if t.key.is_empty() {
                    errs.push(FieldError::invalid(
                        &p.child("operator"),
                        t.operator.map_or("", |o| o.as_str()),
                        "operator must be Exists when `key` is empty, which means \"match all \
                         values and all keys\"",
                    ));
                }
                push_reasons(
                    errs,
                    &p.child("value"),
                    &t.value,
                    names::label_value(&t.value),
                );
            }
        }
        if let Some(secs) = t.toleration_seconds {
            if t.effect != Some(crate::cluster::TaintEffect::NoExecute) {
                errs.push(FieldError::invalid(
                    &p.child("effect"),
                    t.effect.map_or("", |e| e.as_str()),
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                ));
            }
            if secs < 0 {
                errs.push(FieldError::invalid(
                    &p.child("tolerationSeconds"),
                    secs,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

fn validate_failover(
    failover: &FailoverBehavior,
    propagate_deps: Option<bool>,
    spec_path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let path = spec_path.child("failover");
    if let Some(app) = &failover.application {
        if propagate_deps == Some(false) {
            errs.push(FieldError::invalid(
                &spec_path.child("propagateDeps"),
                false,
                "application failover is set, propagateDeps must be true",
            ));
        }
        validate_application_failover(app, &path.child("application"), errs);
    }
    if let Some(cluster) = &failover.cluster {
        validate_cluster_failover(cluster, &path.child("cluster"), errs);
    }
}

fn validate_application_failover(
    app: &ApplicationFailoverBehavior,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    if let Some(secs) = app.decision_conditions.toleration_seconds {
        if secs < 0 {
            errs.push(FieldError::invalid(
                &path.child("decisionConditions").child("tolerationSeconds"),
                secs,
                "must be greater than or equal to 0",
            ));
        }
    }
    let graceful = app.purge_mode.is_some_and(|m| m.is_graceful());
    let gp = path.child("gracePeriodSeconds");
    match app.grace_period_seconds {
        Some(secs) if !graceful => errs.push(FieldError::invalid(
            &gp,
            secs,
            "only takes effect when purgeMode is Graciously or Gracefully",
        )),
        None if graceful => errs.push(FieldError::required(
            &gp,
            "should not be empty when purgeMode is Graciously or Gracefully",
        )),
        _ => {}
    }
    if let Some(secs) = app.grace_period_seconds {
        if secs <= 0 {
            errs.push(FieldError::invalid(&gp, secs, "must be greater than 0"));
        }
    }
    if let Some(sp) = &app.state_preservation {
        validate_state_preservation(sp, &path.child("statePreservation"), errs);
    }
}

fn validate_cluster_failover(
    cluster: &ClusterFailoverBehavior,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    // Absent purge mode means Graciously (defaulting fills it in).
    let graceful = cluster.purge_mode.is_none_or(|m| m.is_graceful());
    if let Some(secs) = cluster.grace_period_seconds {
        let gp = path.child("gracePeriodSeconds");
        if !graceful {
            errs.push(FieldError::invalid(
                &gp,
                secs,
                "only takes effect when purgeMode is Graciously or Gracefully",
            ));
        }
        if secs <= 0 {
            errs.push(FieldError::invalid(&gp, secs, "must be greater than 0"));
        }
    }
    if let Some(sp) = &cluster.state_preservation {
        validate_state_preservation(sp, &path.child("statePreservation"), errs);
    }
    if let Some(secs) = cluster
        .failback
        .as_ref()
        .and_then(|f| f.stabilization_seconds)
    {
        if secs < 0 {
            errs.push(FieldError::invalid(
                &path.child("failback").child("stabilizationSeconds"),
                secs,
                "must be greater than or equal to 0",
            ));
        }
    }
    // Flotilla extension: exactly-once needs the old copy removed first. A graceful purge
    // keeps it (to be applied again when its member returns) beside the new one, and Never
    // keeps it for good.
    let immediate = cluster.purge_mode.is_some_and(|m| m.is_immediate());
    if cluster.fencing.as_ref().is_some_and(|f| f.exactly_once) && !immediate {
        errs.push(FieldError::invalid(
            &path.child("fencing").child("exactlyOnce"),
            true,
            "requires purgeMode Immediately or Directly (a graceful purge keeps the old copy beside the new one)",
        ));
    }
}

fn validate_state_preservation(sp: &StatePreservation, path: &Path, errs: &mut Vec<FieldError>) {
    for (i, rule) in sp.rules.iter().enumerate() {
        let p = path.child("rules").index(i).child("aliasLabelName");
        if rule.alias_label_name.is_empty() {
            errs.push(FieldError::required(&p, "aliasLabelName is required"));
        } else {
            push_reasons(
                errs,
                &p,
                &rule.alias_label_name,
                names::qualified_name(&rule.alias_label_name),
            );
        }
        if rule.json_path.trim().is_empty() {
            errs.push(FieldError::required(
                &path.child("rules").index(i).child("jsonPath"),
                "jsonPath is required",
            ));
        }
    }
}
