use std::sync::Arc;
use std::time::Duration;

use flotilla_api::binding::{AggregatedStatusItem, TargetCluster};
use serde_json::{json, Value};

use super::*;

fn small_limits() -> SandboxLimits {
    SandboxLimits {
        memory_bytes: 8 << 20,
        instruction_budget: 1_000_000,
        wall_clock_budget: Duration::from_secs(5),
    }
}

fn customization(
    name: &str,
    api_version: &str,
    kind: &str,
    rules: CustomizationRules,
) -> ResourceInterpreterCustomization {
    ResourceInterpreterCustomization {
        api_version: CUSTOMIZATION_API_VERSION.to_string(),
        kind: CUSTOMIZATION_KIND.to_string(),
        metadata: flotilla_api::meta::ObjectMeta::named("", name),
        spec: ResourceInterpreterCustomizationSpec {
            target: CustomizationTarget {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            },
            customizations: rules,
        },
    }
}

fn lua(script: &str) -> Option<LuaScript> {
    Some(LuaScript {
        lua_script: script.to_string(),
    })
}

fn health_rule(name: &str, script: &str) -> ResourceInterpreterCustomization {
    customization(
        name,
        "example.io/v1",
        "Widget",
        CustomizationRules {
            health_interpretation: lua(script),
            ..Default::default()
        },
    )
}

fn widget(status: Value) -> Value {
    json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}, "spec": {"replicas": 3}, "status": status})
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "generation": 1},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]}}}
    })
}

#[test]
fn gvk_of_objects() {
    assert_eq!(
        Gvk::of(&deployment()),
        Some(Gvk::new("apps/v1", "Deployment"))
    );
    assert_eq!(Gvk::of(&json!({"kind": "Pod"})), None);
    assert_eq!(Gvk::of(&json!({"apiVersion": "", "kind": "Pod"})), None);
    assert_eq!(Gvk::new("apps/v1", "Deployment").group(), "apps");
    assert_eq!(Gvk::new("v1", "Pod").group(), "");
    assert_eq!(
        Gvk::new("apps/v1", "Deployment").to_string(),
        "apps/v1 Deployment"
    );
}

#[test]
fn health_rules_exist_as_section_12_says() {
    let interpreter = Interpreter::new();
    let with = [
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "DaemonSet"),
        ("v1", "Service"),
        ("networking.k8s.io/v1", "Ingress"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "Pod"),
        ("policy/v1", "PodDisruptionBudget"),
        ("flink.apache.org/v1beta1", "FlinkDeployment"),
    ];
    for (api_version, kind) in with {
        assert!(
            interpreter.has_health_rule(&Gvk::new(api_version, kind)),
            "{kind}"
        );
    }
    let without = [
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("v1", "ConfigMap"),
        ("apps/v1beta1", "Deployment"),
        ("example.io/v1", "Widget"),
    ];
    for (api_version, kind) in without {
        assert!(
            !interpreter.has_health_rule(&Gvk::new(api_version, kind)),
            "{api_version} {kind}"
        );
    }
}

#[test]
fn health_verdicts() {
    let interpreter = Interpreter::new();
    let mut healthy = deployment();
    healthy["status"] =
        json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2});
    assert_eq!(interpreter.health(&healthy), Health::Healthy);
    let mut unhealthy = deployment();
    unhealthy["status"] =
        json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 0});
    assert_eq!(interpreter.health(&unhealthy), Health::Unhealthy);
    let mut malformed = deployment();
    malformed["status"] =
        json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": "two"});
    assert_eq!(interpreter.health(&malformed), Health::Unknown);
    // No rule: healthy, as Karmada's work status records it.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"failed": 3}});
    assert_eq!(interpreter.health(&job), Health::Healthy);
    assert_eq!(interpreter.interpret_health(&job).expect("no rule"), None);
    assert_eq!(interpreter.health(&json!({"status": {}})), Health::Unknown);
    assert!(matches!(
        interpreter.interpret_health(&json!({})),
        Err(InterpretError::NoKind)
    ));
    assert_eq!(
        ResourceHealth::from(Health::Unknown),
        ResourceHealth::Unknown
    );
}

#[test]
fn lua_health_rule_and_its_failures() {
    let interpreter = Interpreter::with_limits(small_limits());
    interpreter
        .add_customization(&health_rule(
            "widget",
            "function InterpretHealth(obj) return obj.status.ready >= obj.spec.replicas end",
        ))
        .expect("add");
    let gvk = Gvk::new("example.io/v1", "Widget");
    assert!(interpreter.has_health_rule(&gvk));
    assert_eq!(
        interpreter.health(&widget(json!({"ready": 3}))),
        Health::Healthy
    );
    assert_eq!(
        interpreter.health(&widget(json!({"ready": 1}))),
        Health::Unhealthy
    );
    // A script error (indexing a missing status) is Unknown.
    assert_eq!(interpreter.health(&widget(Value::Null)), Health::Unknown);
    assert!(matches!(
        interpreter.interpret_health(&widget(Value::Null)),
        Err(InterpretError::Script {
            operation: Operation::InterpretHealth,
            ..
        })
    ));

    let failures = [
        (
            "non-boolean",
            "function InterpretHealth(obj) return 'yes' end",
        ),
        ("nothing", "function InterpretHealth(obj) end"),
        (
            "timeout",
            "function InterpretHealth(obj) while true do end end",
        ),
        (
            "out of memory",
            "function InterpretHealth(obj) return string.rep('x', 1 << 30) end",
        ),
        ("error", "function InterpretHealth(obj) error('no') end"),
    ];
    for (name, script) in failures {
        interpreter
            .add_customization(&health_rule("widget", script))
            .expect(name);
        assert_eq!(
            interpreter.health(&widget(json!({"ready": 3}))),
            Health::Unknown,
            "{name}"
        );
    }
    let err = interpreter
        .add_customization(&health_rule(
            "widget",
            "function InterpretHealth(obj) return 1 end",
        ))
        .and_then(|_| interpreter.interpret_health(&widget(json!({}))))
        .expect_err("non-boolean");
    assert!(err.to_string().contains("must return a boolean"), "{err}");
}

#[test]
fn customizations_are_validated_when_added() {
    let interpreter = Interpreter::new();
    let cases = [
        (
            health_rule("bad", "function InterpretHealth(obj) return end end"),
            "healthInterpretation",
        ),
        (
            health_rule("bad", "function Health(obj) return true end"),
            "healthInterpretation",
        ),
        (
            customization(
                "bad",
                "example.io/v1",
                "Widget",
                CustomizationRules {
                    status_aggregation: lua("function AggregateStatus(a, b) return a end"),
                    replica_resource: lua("function Replicas(o) return 1 end"),
                    ..Default::default()
                },
            ),
            "replicaResource",
        ),
    ];
    for (c, field) in cases {
        let err = interpreter.add_customization(&c).expect_err(field);
        assert!(
            matches!(&err, InterpretError::InvalidCustomization { field: f, .. } if f == &format!("spec.customizations.{field}")),
            "{err}"
        );
    }
    assert!(
        interpreter.customization_names().is_empty(),
        "nothing was added"
    );
    let mut nameless = health_rule("", "function InterpretHealth(o) return true end");
    assert!(matches!(
        interpreter.add_customization(&nameless),
        Err(InterpretError::MalformedCustomization { .. })
    ));
    nameless.metadata.name = "x".to_string();
    nameless.spec.target.kind.clear();
    assert!(matches!(
        interpreter.add_customization(&nameless),
        Err(InterpretError::MalformedCustomization { .. })
    ));
}

#[test]
fn first_customization_by_name_wins_per_operation() {
    let interpreter = Interpreter::new();
    interpreter
        .add_customization(&health_rule(
            "b-rule",
            "function InterpretHealth(o) return false end",
        ))
        .expect("b");
    interpreter
        .add_customization(&health_rule(
            "a-rule",
            "function InterpretHealth(o) return true end",
        ))
        .expect("a");
    let gvk = Gvk::new("example.io/v1", "Widget");
    assert_eq!(
        interpreter.rule_source(&gvk, Operation::InterpretHealth),
        Some(RuleSource::Customization("a-rule".to_string()))
    );
    assert_eq!(interpreter.health(&widget(json!({}))), Health::Healthy);
    assert!(interpreter.remove_customization("a-rule"));
    assert!(!interpreter.remove_customization("a-rule"));
    assert_eq!(interpreter.health(&widget(json!({}))), Health::Unhealthy);
    assert_eq!(
        interpreter.customization_names(),
        vec!["b-rule".to_string()]
    );
}

#[test]
fn user_rules_override_native_rules() {
    let interpreter = Interpreter::new();
    interpreter
        .add_customization(&customization(
            "deploy-health",
            "apps/v1",
            "Deployment",
            CustomizationRules {
                health_interpretation: lua("function InterpretHealth(o) return o.metadata.labels ~= nil and o.metadata.labels.ok == 'yes' end"),
                ..Default::default()
            },
        ))
        .expect("add");
    let mut d = deployment();
    d["metadata"]["labels"] = json!({"ok": "yes"});
    assert_eq!(interpreter.health(&d), Health::Healthy);
    assert_eq!(
        interpreter.rule_source(
            &Gvk::new("apps/v1", "Deployment"),
            Operation::InterpretReplica
        ),
        Some(RuleSource::Native)
    );
}

/// The replicas `interpreter` reads of workload `obj`, and the milli-CPU each one requests.
fn replicas_and_cpu(interpreter: &Interpreter, obj: &Value) -> (i32, Option<i128>) {
    let (n, req) = interpreter
        .replicas(obj)
        .expect("replicas")
        .expect("workload");
    (n, req.map(|r| r.resource_request["cpu"].milli_value()))
}

#[test]
fn native_operations_through_the_interpreter() {
    let interpreter = Interpreter::new();
    assert_eq!(
        replicas_and_cpu(&interpreter, &deployment()),
        (2, Some(100))
    );
    assert_eq!(
        interpreter
            .replicas(&json!({"apiVersion": "v1", "kind": "ConfigMap"}))
            .expect("ok"),
        None
    );

    let revised = interpreter
        .revise_replicas(&deployment(), 1)
        .expect("revise");
    assert_eq!(revised["spec"]["replicas"], json!(1));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
    assert_eq!(interpreter.revise_replicas(&cm, 5).expect("unchanged"), cm);

    let mut member = deployment();
    member["status"] = json!({"replicas": 2, "readyReplicas": 2});
    let reflected = interpreter
        .reflect_status(&member)
        .expect("reflect")
        .expect("status");
    assert_eq!(reflected["readyReplicas"], json!(2));
    assert_eq!(
        interpreter
            .reflect_status(&json!({"apiVersion": "v1", "kind": "ConfigMap", "status": {"x": 1}}))
            .expect("whole"),
        Some(json!({"x": 1}))
    );

    let items = vec![AggregatedStatusItem {
        cluster_name: "member1".to_string(),
        status: Some(reflected),
        applied: true,
        ..Default::default()
    }];
    let status = interpreter
        .aggregate_status(&deployment(), &items)
        .expect("aggregate")
        .expect("rule");
    assert_eq!(status["readyReplicas"], json!(2));
    assert_eq!(
        interpreter.aggregate_status(&cm, &items).expect("no rule"),
        None
    );

    let mut with_deps = deployment();
    with_deps["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "c", "configMap": {"name": "nginx-conf"}}]);
    assert_eq!(
        interpreter.dependencies(&with_deps).expect("deps"),
        vec![ObjectRef::named("v1", "ConfigMap", "default", "nginx-conf")]
    );
    assert_eq!(interpreter.dependencies(&cm).expect("none"), vec![]);
    assert_eq!(
        interpreter.well_known_kind(&Gvk::new("batch/v1", "Job")),
        Some(WellKnownKind::Job)
    );
    assert_eq!(interpreter.retain(&cm, &cm).expect("retain"), cm);
}

#[test]
fn revise_for_cluster_divides_job_completions() {
    let interpreter = Interpreter::new();
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"}, "spec": {"parallelism": 5, "completions": 10}});
    let targets = vec![
        TargetCluster::new("member1", 3),
        TargetCluster::new("member2", 2),
    ];
    let m1 = interpreter
        .revise_for_cluster(&job, &targets, "member1", true)
        .expect("m1");
    let m2 = interpreter
        .revise_for_cluster(&job, &targets, "member2", true)
        .expect("m2");
    assert_eq!(m1["spec"], json!({"parallelism": 3, "completions": 6}));
    assert_eq!(m2["spec"], json!({"parallelism": 2, "completions": 4}));
    // Duplicated placement: replicas untouched, completions still divided.
    let dup = interpreter
        .revise_for_cluster(&job, &targets, "member2", false)
        .expect("dup");
    assert_eq!(dup["spec"], json!({"parallelism": 5, "completions": 4}));
    let queue = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 5}});
    let q = interpreter
        .revise_for_cluster(&queue, &targets, "member1", true)
        .expect("queue");
    assert_eq!(q["spec"], json!({"parallelism": 3}));
}

fn widget_rules() -> CustomizationRules {
    CustomizationRules {
        replica_resource: lua(
            r#"function GetReplicas(o)
                 return o.spec.replicas, { resourceRequest = { cpu = '200m', memory = 64 * 1024 * 1024 }, nodeClaim = { nodeSelector = { pool = 'a' } } }
               end"#,
        ),
        replica_revision: lua("function ReviseReplica(o, n) o.spec.replicas = n return o end"),
        status_reflection: lua("function ReflectStatus(o) if o.status == nil then return nil end return { ready = o.status.ready } end"),
        status_aggregation: lua(
            r#"function AggregateStatus(desired, items)
                 local ready = 0
                 local clusters = {}
                 for i = 1, #items do
                   if items[i].status ~= nil then ready = ready + items[i].status.ready end
                   table.insert(clusters, items[i].clusterName .. '=' .. tostring(items[i].applied) .. '/' .. tostring(items[i].health))
                 end
                 desired.status = { ready = ready, clusters = table.concat(clusters, ',') }
                 return desired
               end"#,
        ),
        dependency_interpretation: lua(
            r#"function GetDependencies(o)
                 return { { apiVersion = 'v1', kind = 'Secret', namespace = o.metadata.namespace, name = o.spec.secret } }
               end"#,
        ),
        retention: lua("function Retain(desired, observed) desired.spec.nodeName = observed.spec.nodeName return desired end"),
        ..Default::default()
    }
}

#[test]
fn lua_rules_for_every_operation() {
    let interpreter = Interpreter::new();
    interpreter
        .add_customization(&customization(
            "widget",
            "example.io/v1",
            "Widget",
            widget_rules(),
        ))
        .expect("add");
    let mut w = widget(json!({"ready": 2}));
    w["spec"]["secret"] = json!("token");

    let (n, req) = interpreter
        .replicas(&w)
        .expect("replicas")
        .expect("workload");
    assert_eq!(n, 3);
    let req = req.expect("requirements");
    assert_eq!(req.resource_request["cpu"].milli_value(), 200);
    assert_eq!(req.resource_request["memory"].value(), 64 * 1024 * 1024);
    assert_eq!(
        req.node_claim
            .map(|c| c.node_selector["pool"].clone())
            .as_deref(),
        Some("a")
    );

    assert_eq!(
        interpreter.revise_replicas(&w, 1).expect("revise")["spec"]["replicas"],
        json!(1)
    );
    assert_eq!(
        interpreter.reflect_status(&w).expect("reflect"),
        Some(json!({"ready": 2}))
    );
    assert_eq!(
        interpreter
            .reflect_status(&widget(Value::Null))
            .expect("none"),
        None
    );

    let items = vec![
        AggregatedStatusItem {
            cluster_name: "a".to_string(),
            status: Some(json!({"ready": 2})),
            applied: true,
            health: Some(ResourceHealth::Healthy),
            ..Default::default()
        },
        AggregatedStatusItem {
            cluster_name: "b".to_string(),
            status: None,
            applied: false,
            applied_message: "cluster(b) not ready".to_string(),
            health: Some(ResourceHealth::Unknown),
        },
    ];
    assert_eq!(
        interpreter.aggregate_status(&w, &items).expect("aggregate"),
        Some(json!({"ready": 2, "clusters": "a=true/Healthy,b=nil/Unknown"}))
    );
    assert_eq!(
        interpreter.dependencies(&w).expect("deps"),
        vec![ObjectRef::named("v1", "Secret", "ns", "token")]
    );
    let observed =
        json!({"apiVersion": "example.io/v1", "kind": "Widget", "spec": {"nodeName": "n1"}});
    assert_eq!(
        interpreter.retain(&w, &observed).expect("retain")["spec"]["nodeName"],
        json!("n1")
    );
}

#[test]
fn unusable_lua_results_are_errors() {
    let interpreter = Interpreter::new();
    let rules = CustomizationRules {
        replica_resource: lua("function GetReplicas(o) return -1 end"),
        replica_revision: lua("function ReviseReplica(o, n) return n end"),
        status_reflection: lua("function ReflectStatus(o) return 'ok' end"),
        status_aggregation: lua("function AggregateStatus(o, items) return nil end"),
        dependency_interpretation: lua("function GetDependencies(o) return { { kind = 5 } } end"),
        ..Default::default()
    };
    interpreter
        .add_customization(&customization("widget", "example.io/v1", "Widget", rules))
        .expect("add");
    let w = widget(json!({}));
    let results = [
        interpreter.replicas(&w).map(|_| ()),
        interpreter.revise_replicas(&w, 1).map(|_| ()),
        interpreter.reflect_status(&w).map(|_| ()),
        interpreter.aggregate_status(&w, &[]).map(|_| ()),
        interpreter.dependencies(&w).map(|_| ()),
    ];
    for r in results {
        assert!(matches!(r, Err(InterpretError::BadResult { .. })), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_across_tokio_tasks() {
    let interpreter = Arc::new(Interpreter::new());
    interpreter
        .add_customization(&health_rule(
            "widget",
            "function InterpretHealth(o) return o.status.ready >= 2 end",
        ))
        .expect("add");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let interpreter = interpreter.clone();
        tasks.push(tokio::spawn(async move {
            let ready = i % 4;
            (ready, interpreter.health(&widget(json!({"ready": ready}))))
        }));
    }
    for task in tasks {
        let (ready, health) = task.await.expect("task");
        let want = if ready >= 2 {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
        assert_eq!(health, want);
    }
}

/// The example in docs/interpreter.md is a working customization.
#[test]
fn documented_example_works() {
    let doc = include_str!("../../../docs/interpreter.md");
    let start = doc
        .find("```yaml\napiVersion: config.karmada.io/v1alpha1")
        .expect("example in the doc")
        + "```yaml\n".len();
    let len = doc[start..].find("```").expect("end of the example");
    let c: ResourceInterpreterCustomization =
        serde_yaml_ng::from_str(&doc[start..start + len]).expect("yaml");
    let interpreter = Interpreter::new();
    interpreter.add_customization(&c).expect("compiles");
    let gvk = Gvk::new(&c.spec.target.api_version, &c.spec.target.kind);
    for op in Operation::ALL {
        if op != Operation::Retain {
            assert!(interpreter.has_rule(&gvk, op), "{op}");
        }
    }
    let object = |ready: i64, observed: i64| {
        json!({
            "apiVersion": gvk.api_version, "kind": gvk.kind,
            "metadata": {"name": "demo", "namespace": "default", "generation": 2},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}, "envFrom": [{"configMapRef": {"name": "demo-config"}}]}]}}},
            "status": {"readyReplicas": ready, "observedGeneration": observed}
        })
    };
    assert_eq!(interpreter.health(&object(3, 2)), Health::Healthy);
    assert_eq!(interpreter.health(&object(2, 2)), Health::Unhealthy);
    assert_eq!(interpreter.health(&object(3, 1)), Health::Unhealthy);
    assert_eq!(
        replicas_and_cpu(&interpreter, &object(0, 0)),
        (3, Some(250))
    );
    assert_eq!(
        interpreter
            .revise_replicas(&object(0, 0), 1)
            .expect("revise")["spec"]["replicas"],
        json!(1)
    );
    let reflected = interpreter
        .reflect_status(&object(3, 2))
        .expect("reflect")
        .expect("status");
    let items = vec![AggregatedStatusItem {
        cluster_name: "member1".to_string(),
        status: Some(reflected),
        applied: true,
        ..Default::default()
    }];
    let status = interpreter
        .aggregate_status(&object(0, 0), &items)
        .expect("aggregate")
        .expect("rule");
    assert_eq!(status["readyReplicas"], json!(3));
    assert_eq!(
        interpreter.dependencies(&object(0, 0)).expect("deps"),
        vec![ObjectRef::named(
            "v1",
            "ConfigMap",
            "default",
            "demo-config"
        )]
    );
}
