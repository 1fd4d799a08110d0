//! Defaulting: the values Flotilla fills in before validating and storing an object, so that
//! every controller reads explicit settings. Policies get Karmada's webhook and CRD defaults
//! (docs/semantics.md §6.3) plus Flotilla's (Part 1): default `not-ready`/`unreachable`
//! tolerations, `Graciously` purge modes, and `propagateDeps: true` with application failover.
//! Every function is idempotent: defaulting a defaulted object changes nothing.

use chrono::{DateTime, Utc};

use crate::binding::{
    ClusterResourceBinding, ResourceBinding, CRB_PERMANENT_ID_LABEL, RB_PERMANENT_ID_LABEL,
};
use crate::cluster::{Cluster, TaintEffect, TAINT_CLUSTER_NOT_READY, TAINT_CLUSTER_UNREACHABLE};
use crate::meta::{ObjectMeta, Time};
use crate::policy::{
    ClusterPropagationPolicy, ConflictResolution, FailoverBehavior, Placement, Preemption,
    PropagationPolicy, PropagationSpec, PurgeMode, ReplicaDivisionPreference,
    ReplicaSchedulingType, SpreadByField, Toleration, CPP_PERMANENT_ID_LABEL,
    DEFAULT_SCHEDULER_NAME, PP_PERMANENT_ID_LABEL,
};
use crate::taint_toleration::tolerates;

/// Application failover `tolerationSeconds` when absent.
pub const DEFAULT_APPLICATION_TOLERATION_SECONDS: i32 = 300;
/// Application failover `gracePeriodSeconds` for graceful purge modes when absent.
pub const DEFAULT_APPLICATION_GRACE_PERIOD_SECONDS: i32 = 600;
/// Purge mode when absent (the guide's spelling).
pub const DEFAULT_PURGE_MODE: PurgeMode = PurgeMode::Graciously;

/// Server settings that defaulting depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultingConfig {
    /// `tolerationSeconds` of the default `cluster.karmada.io/not-ready` toleration
    /// (`--default-not-ready-toleration-seconds`).
    pub not_ready_toleration_seconds: i64,
    /// `tolerationSeconds` of the default `cluster.karmada.io/unreachable` toleration
    /// (`--default-unreachable-toleration-seconds`).
    pub unreachable_toleration_seconds: i64,
}

impl Default for DefaultingConfig {
    fn default() -> Self {
        DefaultingConfig {
            not_ready_toleration_seconds: 300,
            unreachable_toleration_seconds: 300,
        }
    }
}

/// Sets `label` from the old object on update, else from `metadata.uid`, unless present.
fn default_permanent_id(meta: &mut ObjectMeta, old: Option<&ObjectMeta>, label: &str) {
    if meta.labels.contains_key(label) {
        return;
    }
    let id = old
        .and_then(|o| o.label(label))
        .map(str::to_string)
        .or_else(|| (!meta.uid.is_empty()).then(|| meta.uid.clone()));
    if let Some(id) = id {
        meta.labels.insert(label.to_string(), id);
    }
}

/// Defaults a PropagationPolicy (`old` is the stored object on update).
pub fn default_propagation_policy(
    pp: &mut PropagationPolicy,
    old: Option<&PropagationPolicy>,
    cfg: &DefaultingConfig,
) {
    default_permanent_id(
        &mut pp.metadata,
        old.map(|o| &o.metadata),
        PP_PERMANENT_ID_LABEL,
    );
    let namespace = pp.metadata.namespace.clone();
    default_propagation_spec(&mut pp.spec, Some(&namespace), cfg);
}

/// Defaults a ClusterPropagationPolicy (`old` is the stored object on update).
pub fn default_cluster_propagation_policy(
    cpp: &mut ClusterPropagationPolicy,
    old: Option<&ClusterPropagationPolicy>,
    cfg: &DefaultingConfig,
) {
    default_permanent_id(
        &mut cpp.metadata,
        old.map(|o| &o.metadata),
        CPP_PERMANENT_ID_LABEL,
    );
    default_propagation_spec(&mut cpp.spec, None, cfg);
}

fn selects_service_import(spec: &PropagationSpec) -> bool {
    spec.resource_selectors
        .iter()
        .any(|rs| rs.api_version == "multicluster.x-k8s.io/v1alpha1" && rs.kind == "ServiceImport")
}

/// Defaults a policy spec. `namespace` is the PropagationPolicy's namespace (`None` for
/// ClusterPropagationPolicies): selectors without a namespace get it.
pub fn default_propagation_spec(
    spec: &mut PropagationSpec,
    namespace: Option<&str>,
    cfg: &DefaultingConfig,
) {
    if let Some(ns) = namespace {
        for rs in &mut spec.resource_selectors {
            if rs.namespace.is_empty() {
                rs.namespace = ns.to_string();
            }
        }
    }
    if selects_service_import(spec) {
        spec.propagate_deps = Some(true);
    }
    if spec.has_application_failover() && spec.propagate_deps.is_none() {
        spec.propagate_deps = Some(true);
    }
    default_placement(&mut spec.placement, cfg);
    if let Some(failover) = &mut spec.failover {
        default_failover(failover);
    }
    spec.priority.get_or_insert(0);
    spec.preemption.get_or_insert(Preemption::Never);
    spec.conflict_resolution
        .get_or_insert(ConflictResolution::Abort);
    if spec.scheduler_name.is_empty() {
        spec.scheduler_name = DEFAULT_SCHEDULER_NAME.to_string();
    }
}

/// True when some toleration already covers `key`'s NoExecute taint: one written for that key
/// with effect NoExecute (or any effect), or one that tolerates the taint as such (e.g. a
/// key-less `Exists`).
fn covers_no_execute(tolerations: &[Toleration], key: &str) -> bool {
    let taint = crate::cluster::Taint::new(key, TaintEffect::NoExecute);
    tolerations.iter().any(|t| {
        (t.key == key && t.effect.is_none_or(|e| e == TaintEffect::NoExecute))
            || tolerates(t, &taint)
    })
}

/// Defaults a placement: the default NoExecute tolerations, spread constraints and replica
/// scheduling.
pub fn default_placement(placement: &mut Placement, cfg: &DefaultingConfig) {
    for (key, seconds) in [
        (TAINT_CLUSTER_NOT_READY, cfg.not_ready_toleration_seconds),
        (
            TAINT_CLUSTER_UNREACHABLE,
            cfg.unreachable_toleration_seconds,
        ),
    ] {
        if !covers_no_execute(&placement.cluster_tolerations, key) {
            placement.cluster_tolerations.push(Toleration::exists(
                key,
                Some(TaintEffect::NoExecute),
                Some(seconds),
            ));
        }
    }
    for c in &mut placement.spread_constraints {
        if c.spread_by_field.is_none() && c.spread_by_label.is_empty() {
            c.spread_by_field = Some(SpreadByField::Cluster);
        }
        if c.min_groups == 0 {
            c.min_groups = 1;
        }
    }
    if let Some(rs) = &mut placement.replica_scheduling {
        let t = *rs
            .replica_scheduling_type
            .get_or_insert(ReplicaSchedulingType::Divided);
        if t == ReplicaSchedulingType::Divided && rs.replica_division_preference.is_none() {
            rs.replica_division_preference = Some(ReplicaDivisionPreference::Weighted);
        }
    }
}

/// Defaults failover behaviour: purge modes, the application's toleration and grace period,
/// failback's stabilization window.
pub fn default_failover(failover: &mut FailoverBehavior) {
    if let Some(app) = &mut failover.application {
        let mode = *app.purge_mode.get_or_insert(DEFAULT_PURGE_MODE);
        app.decision_conditions
            .toleration_seconds
            .get_or_insert(DEFAULT_APPLICATION_TOLERATION_SECONDS);
        if mode.is_graceful() {
            app.grace_period_seconds
                .get_or_insert(DEFAULT_APPLICATION_GRACE_PERIOD_SECONDS);
        }
    }
    if let Some(cluster) = &mut failover.cluster {
        cluster.purge_mode.get_or_insert(DEFAULT_PURGE_MODE);
        if let Some(failback) = &mut cluster.failback {
            failback
                .stabilization_seconds
                .get_or_insert(crate::policy::failover::DEFAULT_FAILBACK_STABILIZATION_SECONDS);
        }
    }
}

/// Defaults a Cluster: the deprecated `zone` moves into `zones` when `zones` is empty, and
/// NoExecute taints without `timeAdded` get `now`.
pub fn default_cluster(cluster: &mut Cluster, now: DateTime<Utc>) {
    let spec = &mut cluster.spec;
    if !spec.zone.is_empty() && spec.zones.is_empty() {
        spec.zones = vec![std::mem::take(&mut spec.zone)];
    }
    for t in &mut spec.taints {
        if t.effect == TaintEffect::NoExecute && t.time_added.is_none() {
            t.time_added = Some(Time::new(now));
        }
    }
}

/// Defaults a ResourceBinding: its permanent id.
pub fn default_resource_binding(rb: &mut ResourceBinding, old: Option<&ResourceBinding>) {
    default_permanent_id(
        &mut rb.metadata,
        old.map(|o| &o.metadata),
        RB_PERMANENT_ID_LABEL,
    );
}

/// Defaults a ClusterResourceBinding: its permanent id.
pub fn default_cluster_resource_binding(
    crb: &mut ClusterResourceBinding,
    old: Option<&ClusterResourceBinding>,
) {
    default_permanent_id(
        &mut crb.metadata,
        old.map(|o| &o.metadata),
        CRB_PERMANENT_ID_LABEL,
    );
}
