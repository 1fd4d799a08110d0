//! One row per defaulting rule (docs/semantics.md §6.3 and Part 1): each row admits an
//! object and checks the value at a JSON pointer. Then property tests: defaulting is
//! idempotent, on typed specs and through admission.

// Helpers outside #[test] functions unwrap too: this whole crate is a test.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use flotilla_api::defaulting::{default_propagation_spec, DefaultingConfig};
use flotilla_api::policy::*;
use flotilla_api::{admit, ValidationErrors};
use proptest::prelude::*;
use serde_json::{json, Value};

struct Row {
    rule: &'static str,
    obj: Value,
    pointer: &'static str,
    /// `None`: the field must stay absent.
    want: Option<Value>,
}

fn row(rule: &'static str, obj: Value, pointer: &'static str, want: Option<Value>) -> Row {
    Row {
        rule,
        obj,
        pointer,
        want,
    }
}

fn spec(patch: Value) -> Value {
    patched(&pp(), &json!({ "spec": patch }))
}

fn check(rows: Vec<Row>, cfg: &DefaultingConfig) {
    let mut failures = Vec::new();
    for r in rows {
        match admit_with(&r.obj, None, cfg) {
            Err(e) => failures.push(format!("{}: rejected: {e}", r.rule)),
            Ok(v) => {
                let got = v.pointer(r.pointer).cloned();
                if got != r.want {
                    failures.push(format!(
                        "{}: {} is {:?}, want {:?}",
                        r.rule, r.pointer, got, r.want
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn policy_defaults() {
    let app = |patch: Value| {
        let mut a = json!({"decisionConditions": {"tolerationSeconds": 60}});
        merge_patch(&mut a, &patch);
        spec(json!({"failover": {"application": a}}))
    };
    check(
        vec![
            row(
                "PP selectors get the policy namespace",
                pp(),
                "/spec/resourceSelectors/0/namespace",
                Some(json!("default")),
            ),
            row(
                "CPP selectors keep an empty namespace",
                cpp(),
                "/spec/resourceSelectors/0/namespace",
                None,
            ),
            row(
                "spread constraint without field or label spreads by cluster",
                spec(json!({"placement": {"spreadConstraints": [{"maxGroups": 2}]}})),
                "/spec/placement/spreadConstraints/0/spreadByField",
                Some(json!("cluster")),
            ),
            row(
                "spread by label gets no field",
                spec(json!({"placement": {"spreadConstraints": [{"spreadByLabel": "rack"}]}})),
                "/spec/placement/spreadConstraints/0/spreadByField",
                None,
            ),
            row(
                "absent minGroups becomes 1",
                spec(json!({"placement": {"spreadConstraints": [{"spreadByField": "cluster"}]}})),
                "/spec/placement/spreadConstraints/0/minGroups",
                Some(json!(1)),
            ),
            row(
                "minGroups 0 becomes 1",
                spec(json!({"placement": {"spreadConstraints": [
                    {"spreadByField": "cluster", "minGroups": 0}]}})),
                "/spec/placement/spreadConstraints/0/minGroups",
                Some(json!(1)),
            ),
            row(
                "maxGroups has no default",
                spec(json!({"placement": {"spreadConstraints": [{"spreadByField": "cluster"}]}})),
                "/spec/placement/spreadConstraints/0/maxGroups",
                None,
            ),
            row(
                "ServiceImport selector forces propagateDeps",
                spec(
                    json!({"resourceSelectors": [{"apiVersion": "multicluster.x-k8s.io/v1alpha1",
                    "kind": "ServiceImport", "name": "svc"}]}),
                ),
                "/spec/propagateDeps",
                Some(json!(true)),
            ),
            row(
                "propagateDeps has no default otherwise",
                pp(),
                "/spec/propagateDeps",
                None,
            ),
            row(
                "replicaScheduling present without type is Divided",
                spec(json!({"placement": {"replicaScheduling": {}}})),
                "/spec/placement/replicaScheduling/replicaSchedulingType",
                Some(json!("Divided")),
            ),
            row(
                "Divided without preference is Weighted",
                spec(
                    json!({"placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}}),
                ),
                "/spec/placement/replicaScheduling/replicaDivisionPreference",
                Some(json!("Weighted")),
            ),
            row(
                "Divided keeps Aggregated",
                spec(
                    json!({"placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Aggregated"}}}),
                ),
                "/spec/placement/replicaScheduling/replicaDivisionPreference",
                Some(json!("Aggregated")),
            ),
            row(
                "Duplicated gets no preference",
                spec(
                    json!({"placement": {"replicaScheduling": {"replicaSchedulingType": "Duplicated"}}}),
                ),
                "/spec/placement/replicaScheduling/replicaDivisionPreference",
                None,
            ),
            row(
                "absent replicaScheduling stays absent (Duplicated)",
                pp(),
                "/spec/placement/replicaScheduling",
                None,
            ),
            row(
                "application purgeMode defaults to Graciously",
                app(json!({})),
                "/spec/failover/application/purgeMode",
                Some(json!("Graciously")),
            ),
            row(
                "Graciously without gracePeriodSeconds gets 600",
                app(json!({})),
                "/spec/failover/application/gracePeriodSeconds",
                Some(json!(600)),
            ),
            row(
                "Gracefully keeps its spelling",
                app(json!({"purgeMode": "Gracefully"})),
                "/spec/failover/application/purgeMode",
                Some(json!("Gracefully")),
            ),
            row(
                "Gracefully without gracePeriodSeconds gets 600",
                app(json!({"purgeMode": "Gracefully"})),
                "/spec/failover/application/gracePeriodSeconds",
                Some(json!(600)),
            ),
            row(
                "an explicit grace period is kept",
                app(json!({"purgeMode": "Graciously", "gracePeriodSeconds": 30})),
                "/spec/failover/application/gracePeriodSeconds",
                Some(json!(30)),
            ),
            row(
                "Never gets no grace period",
                app(json!({"purgeMode": "Never"})),
                "/spec/failover/application/gracePeriodSeconds",
                None,
            ),
            row(
                "Immediately keeps its spelling",
                app(json!({"purgeMode": "Immediately"})),
                "/spec/failover/application/purgeMode",
                Some(json!("Immediately")),
            ),
            row(
                "Directly keeps its spelling",
                app(json!({"purgeMode": "Directly"})),
                "/spec/failover/application/purgeMode",
                Some(json!("Directly")),
            ),
            row(
                "decisionConditions.tolerationSeconds defaults to 300",
                spec(json!({"failover": {"application": {"purgeMode": "Never"}}})),
                "/spec/failover/application/decisionConditions/tolerationSeconds",
                Some(json!(300)),
            ),
            row(
                "tolerationSeconds 0 is kept",
                app(json!({"decisionConditions": {"tolerationSeconds": 0}})),
                "/spec/failover/application/decisionConditions/tolerationSeconds",
                Some(json!(0)),
            ),
            row(
                "application failover defaults propagateDeps to true (Part 1)",
                app(json!({})),
                "/spec/propagateDeps",
                Some(json!(true)),
            ),
            row(
                "an explicit propagateDeps true is kept",
                patched(&app(json!({})), &json!({"spec": {"propagateDeps": true}})),
                "/spec/propagateDeps",
                Some(json!(true)),
            ),
            row(
                "cluster failover purgeMode defaults to Graciously",
                spec(json!({"failover": {"cluster": {"gracePeriodSeconds": 100}}})),
                "/spec/failover/cluster/purgeMode",
                Some(json!("Graciously")),
            ),
            row(
                "cluster failover keeps Directly",
                spec(json!({"failover": {"cluster": {"purgeMode": "Directly"}}})),
                "/spec/failover/cluster/purgeMode",
                Some(json!("Directly")),
            ),
            row(
                "cluster failover gets no grace period",
                spec(json!({"failover": {"cluster": {}}})),
                "/spec/failover/cluster/gracePeriodSeconds",
                None,
            ),
            row(
                "failback's window defaults to 300 s (Flotilla extension)",
                spec(json!({"failover": {"cluster": {"failback": {}}}})),
                "/spec/failover/cluster/failback/stabilizationSeconds",
                Some(json!(300)),
            ),
            row(
                "failback's window is kept",
                spec(json!({"failover": {"cluster": {"failback": {"stabilizationSeconds": 0}}}})),
                "/spec/failover/cluster/failback/stabilizationSeconds",
                Some(json!(0)),
            ),
            row(
                "no failback unless asked",
                spec(json!({"failover": {"cluster": {}}})),
                "/spec/failover/cluster/failback",
                None,
            ),
            row(
                "cluster failover alone does not touch propagateDeps",
                spec(json!({"failover": {"cluster": {}}})),
                "/spec/propagateDeps",
                None,
            ),
            row(
                "priority defaults to 0",
                pp(),
                "/spec/priority",
                Some(json!(0)),
            ),
            row(
                "an explicit priority is kept",
                spec(json!({"priority": 5})),
                "/spec/priority",
                Some(json!(5)),
            ),
            row(
                "preemption defaults to Never",
                pp(),
                "/spec/preemption",
                Some(json!("Never")),
            ),
            row(
                "conflictResolution defaults to Abort",
                pp(),
                "/spec/conflictResolution",
                Some(json!("Abort")),
            ),
            row(
                "an explicit Overwrite is kept",
                spec(json!({"conflictResolution": "Overwrite"})),
                "/spec/conflictResolution",
                Some(json!("Overwrite")),
            ),
            row(
                "schedulerName defaults to default-scheduler",
                pp(),
                "/spec/schedulerName",
                Some(json!("default-scheduler")),
            ),
            row(
                "an explicit schedulerName is kept",
                spec(json!({"schedulerName": "mine"})),
                "/spec/schedulerName",
                Some(json!("mine")),
            ),
            row(
                "PP permanent id from the uid",
                pp(),
                "/metadata/labels/propagationpolicy.karmada.io~1permanent-id",
                Some(json!("uid-pp")),
            ),
            row(
                "CPP permanent id from the uid",
                cpp(),
                "/metadata/labels/clusterpropagationpolicy.karmada.io~1permanent-id",
                Some(json!("uid-cpp")),
            ),
            row(
                "an explicit permanent id is kept",
                patched(
                    &pp(),
                    &json!({"metadata": {"labels": {
                    "propagationpolicy.karmada.io/permanent-id": "mine"}}}),
                ),
                "/metadata/labels/propagationpolicy.karmada.io~1permanent-id",
                Some(json!("mine")),
            ),
            row("no finalizer is added", pp(), "/metadata/finalizers", None),
        ],
        &DefaultingConfig::default(),
    );
}

#[test]
fn default_tolerations() {
    let cfg = DefaultingConfig {
        not_ready_toleration_seconds: 120,
        unreachable_toleration_seconds: 60,
    };
    let tolerations = |patch: Value| -> Value {
        let v = admit_with(
            &spec(json!({"placement": {"clusterTolerations": patch}})),
            None,
            &cfg,
        )
        .unwrap();
        v["spec"]["placement"]["clusterTolerations"].clone()
    };
    let not_ready = json!({"key": "cluster.karmada.io/not-ready", "operator": "Exists",
                           "effect": "NoExecute", "tolerationSeconds": 120});
    let unreachable = json!({"key": "cluster.karmada.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 60});

    // None written: both added with the configured seconds.
    let v = admit_with(&pp(), None, &cfg).unwrap();
    assert_eq!(
        v["spec"]["placement"]["clusterTolerations"],
        json!([not_ready.clone(), unreachable.clone()])
    );
    // A toleration for the key with NoExecute wins (any operator, any seconds).
    let own = json!({"key": "cluster.karmada.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 30});
    assert_eq!(
        tolerations(json!([own.clone()])),
        json!([own, unreachable.clone()])
    );
    // A toleration for the key without effect covers NoExecute too.
    let any_effect = json!({"key": "cluster.karmada.io/unreachable", "operator": "Exists"});
    assert_eq!(
        tolerations(json!([any_effect.clone()])),
        json!([any_effect, not_ready.clone()])
    );
    // A key-less Exists toleration covers both.
    let all = json!({"operator": "Exists"});
    assert_eq!(tolerations(json!([all.clone()])), json!([all]));
    // A NoSchedule toleration for the key does not.
    let no_schedule = json!({"key": "cluster.karmada.io/not-ready", "operator": "Exists",
                             "effect": "NoSchedule"});
    assert_eq!(
        tolerations(json!([no_schedule.clone()])),
        json!([no_schedule, not_ready, unreachable])
    );
}

#[test]
fn cluster_and_binding_defaults() {
    let c = |patch: Value| patched(&cluster(), &patch);
    check(
        vec![
            row(
                "zone moves into zones",
                c(json!({"spec": {"zone": "eu-1a"}})),
                "/spec/zones",
                Some(json!(["eu-1a"])),
            ),
            row(
                "and zone goes",
                c(json!({"spec": {"zone": "eu-1a"}})),
                "/spec/zone",
                None,
            ),
            row(
                "zone stays when zones are set",
                c(json!({"spec": {"zone": "eu-1a", "zones": ["eu-1b"]}})),
                "/spec/zone",
                Some(json!("eu-1a")),
            ),
            row(
                "NoExecute taints get timeAdded = now",
                c(json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}})),
                "/spec/taints/0/timeAdded",
                Some(json!("2024-05-01T10:00:00Z")),
            ),
            row(
                "an existing timeAdded is kept",
                c(
                    json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute",
                    "timeAdded": "2023-01-01T00:00:00Z"}]}}),
                ),
                "/spec/taints/0/timeAdded",
                Some(json!("2023-01-01T00:00:00Z")),
            ),
            row(
                "NoSchedule taints get no timeAdded",
                c(json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})),
                "/spec/taints/0/timeAdded",
                None,
            ),
            row(
                "ResourceBinding permanent id from the uid",
                rb(),
                "/metadata/labels/resourcebinding.karmada.io~1permanent-id",
                Some(json!("uid-rb")),
            ),
        ],
        &DefaultingConfig::default(),
    );
}

#[test]
fn admission_keeps_unknown_fields_and_ignores_foreign_kinds() {
    let obj = patched(
        &pp(),
        &json!({"spec": {"futureField": {"x": 1}, "placement": {"clusterAffinity": {
            "clusterNames": ["m1"], "newKnob": true}}}, "extra": [1, 2]}),
    );
    let v = admit_create(&obj).unwrap();
    assert_eq!(v["spec"]["futureField"], json!({"x": 1}));
    assert_eq!(
        v["spec"]["placement"]["clusterAffinity"]["newKnob"],
        json!(true)
    );
    assert_eq!(v["extra"], json!([1, 2]));

    let mut deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                "metadata": {"name": "x"}, "spec": {"replicas": "weird"}});
    let before = deployment.clone();
    admit(
        "apps",
        "Deployment",
        &mut deployment,
        None,
        &DefaultingConfig::default(),
        now(),
    )
    .unwrap();
    assert_eq!(deployment, before);

    // A rejected object is left as it was.
    let mut bad = spec(json!({"placement": {"spreadConstraints": [{"minGroups": -1}]}}));
    let before = bad.clone();
    let res: Result<(), ValidationErrors> = admit(
        "policy.karmada.io",
        "PropagationPolicy",
        &mut bad,
        None,
        &DefaultingConfig::default(),
        now(),
    );
    assert!(res.is_err());
    assert_eq!(bad, before);
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    proptest::option::of(s).boxed()
}

fn purge_mode() -> impl Strategy<Value = PurgeMode> {
    prop_oneof![
        Just(PurgeMode::Immediately),
        Just(PurgeMode::Directly),
        Just(PurgeMode::Graciously),
        Just(PurgeMode::Gracefully),
        Just(PurgeMode::Never),
    ]
}

fn toleration() -> impl Strategy<Value = Toleration> {
    use flotilla_api::cluster::TaintEffect;
    (
        prop::sample::select(vec![
            "",
            "cluster.karmada.io/not-ready",
            "cluster.karmada.io/unreachable",
            "custom",
        ]),
        opt(prop::sample::select(vec![
            TolerationOperator::Equal,
            TolerationOperator::Exists,
        ])),
        opt(prop::sample::select(vec![
            TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute,
        ])),
        opt(-5i64..500),
    )
        .prop_map(|(key, operator, effect, secs)| Toleration {
            key: key.to_string(),
            operator,
            value: String::new(),
            effect,
            toleration_seconds: secs,
        })
}

fn spread() -> impl Strategy<Value = SpreadConstraint> {
    (
        opt(prop::sample::select(vec![
            SpreadByField::Cluster,
            SpreadByField::Region,
            SpreadByField::Zone,
            SpreadByField::Provider,
        ])),
        prop::sample::select(vec!["", "rack"]),
        0i64..4,
        -1i64..4,
    )
        .prop_map(|(f, l, max, min)| SpreadConstraint {
            spread_by_field: f,
            spread_by_label: l.to_string(),
            max_groups: max,
            min_groups: min,
        })
}

fn replica_scheduling() -> impl Strategy<Value = ReplicaSchedulingStrategy> {
    (
        opt(prop::sample::select(vec![
            ReplicaSchedulingType::Duplicated,
            ReplicaSchedulingType::Divided,
        ])),
        opt(prop::sample::select(vec![
            ReplicaDivisionPreference::Aggregated,
            ReplicaDivisionPreference::Weighted,
        ])),
        any::<bool>(),
    )
        .prop_map(|(t, p, dynamic)| ReplicaSchedulingStrategy {
            replica_scheduling_type: t,
            replica_division_preference: p,
            weight_preference: dynamic.then(|| ClusterPreferences {
                static_weight_list: vec![],
                dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
            }),
        })
}

fn failover() -> impl Strategy<Value = FailoverBehavior> {
    let app = (opt(purge_mode()), opt(-1i32..400), opt(-1i32..700)).prop_map(|(m, t, g)| {
        ApplicationFailoverBehavior {
            decision_conditions: DecisionConditions {
                toleration_seconds: t,
            },
            purge_mode: m,
            grace_period_seconds: g,
            state_preservation: None,
        }
    });
    let cluster = (opt(purge_mode()), opt(-1i32..200)).prop_map(|(m, g)| ClusterFailoverBehavior {
        purge_mode: m,
        grace_period_seconds: g,
        state_preservation: None,
        fencing: None,
        failback: None,
    });
    (opt(app), opt(cluster)).prop_map(|(application, cluster)| FailoverBehavior {
        application,
        cluster,
    })
}

fn propagation_spec() -> impl Strategy<Value = PropagationSpec> {
    let selectors = prop::collection::vec(
        (
            prop::sample::select(vec![
                ("apps/v1", "Deployment"),
                ("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
            ]),
            prop::sample::select(vec!["", "default", "other"]),
            prop::sample::select(vec!["", "nginx"]),
        )
            .prop_map(|((av, kind), ns, name)| ResourceSelector {
                api_version: av.to_string(),
                kind: kind.to_string(),
                namespace: ns.to_string(),
                name: name.to_string(),
                label_selector: None,
            }),
        0..3,
    );
    (
        selectors,
        opt(any::<bool>()),
        prop::collection::vec(toleration(), 0..4),
        prop::collection::vec(spread(), 0..3),
        opt(replica_scheduling()),
        opt(failover()),
        opt(-2i32..3),
        prop::sample::select(vec!["", "default-scheduler", "mine"]),
    )
        .prop_map(
            |(rs, deps, tols, spreads, sched, failover, priority, scheduler)| PropagationSpec {
                resource_selectors: rs,
                propagate_deps: deps,
                placement: Placement {
                    cluster_tolerations: tols,
                    spread_constraints: spreads,
                    replica_scheduling: sched,
                    ..Default::default()
                },
                priority,
                scheduler_name: scheduler.to_string(),
                failover,
                ..Default::default()
            },
        )
}

/// Repairs the most common invalid parts of a generated spec so that most admissions succeed.
fn mostly_valid(mut spec: PropagationSpec) -> PropagationSpec {
    use flotilla_api::cluster::TaintEffect;
    for rs in &mut spec.resource_selectors {
        rs.namespace.clear();
    }
    if spec.resource_selectors.is_empty() {
        spec.resource_selectors.push(ResourceSelector {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            ..Default::default()
        });
    }
    for t in &mut spec.placement.cluster_tolerations {
        if t.key.is_empty() {
            t.operator = Some(TolerationOperator::Exists);
        }
        if t.toleration_seconds.is_some() {
            t.effect = Some(TaintEffect::NoExecute);
            t.toleration_seconds = t.toleration_seconds.map(|s| s.max(0));
        }
    }
    spec.placement.spread_constraints.truncate(1);
    for c in &mut spec.placement.spread_constraints {
        c.spread_by_field = Some(SpreadByField::Cluster);
        c.spread_by_label.clear();
        c.min_groups = c.min_groups.max(0);
        c.max_groups = c.max_groups.max(c.min_groups);
    }
    spec
}

proptest! {
    #[test]
    fn defaulting_a_spec_is_idempotent(
        spec in propagation_spec(),
        namespace in opt(Just("default")),
        nr in 0i64..600,
        ur in 0i64..600,
    ) {
        let cfg = DefaultingConfig {
            not_ready_toleration_seconds: nr,
            unreachable_toleration_seconds: ur,
        };
        let mut once = spec.clone();
        default_propagation_spec(&mut once, namespace, &cfg);
        let mut twice = once.clone();
        default_propagation_spec(&mut twice, namespace, &cfg);
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn admission_is_idempotent(spec in propagation_spec()) {
        let mut obj = pp();
        obj["spec"] = serde_json::to_value(mostly_valid(spec)).unwrap();
        // Only valid objects are stored, so only they must be stable.
        if let Ok(first) = admit_create(&obj) {
            let second = admit_create(&first).unwrap();
            prop_assert_eq!(&first, &second);
            let update = admit_with(&first, Some(&first), &DefaultingConfig::default()).unwrap();
            prop_assert_eq!(&first, &update);
        }
    }
}
