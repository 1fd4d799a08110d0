use flotilla_api::binding::AggregatedStatusItem;
use serde_json::{json, Value};

use crate::interpreter::{jsonpath, Gvk, Health, Interpreter, Operation, RuleSource};

fn flink(status: Option<Value>) -> Value {
    let mut obj = json!({
        "apiVersion": "flink.apache.org/v1beta1",
        "kind": "FlinkDeployment",
        "metadata": {"name": "foo", "namespace": "default", "generation": 1},
        "spec": {
            "job": {"jarURI": "local:///opt/flink/examples/streaming/StateMachineExample.jar", "parallelism": 2},
            "jobManager": {"resource": {"cpu": 1, "memory": "2048m"}},
            "taskManager": {"resource": {"cpu": 0.5, "memory": "1g"}}
        }
    });
    if let (Some(status), Value::Object(map)) = (status, &mut obj) {
        map.insert("status".to_string(), status);
    }
    obj
}

fn job(state: &str) -> Value {
    json!({"jobStatus": {"jobID": "e8a1b2c3d4", "state": state, "jobName": "sm"}, "lifecycleState": "STABLE", "jobManagerDeploymentStatus": "READY"})
}

#[test]
fn every_builtin_compiles() {
    for builtin in super::builtins() {
        let set = crate::interpreter::lua::ScriptSet::new(
            builtin.name,
            builtin.scripts,
            crate::interpreter::SandboxLimits::default(),
        );
        assert_eq!(set.compile(), Ok(()), "{}", builtin.name);
    }
}

#[test]
fn flink_health_table() {
    let interpreter = Interpreter::new();
    let rows: Vec<(&str, Option<Value>, Health)> = vec![
        ("running", Some(job("RUNNING")), Health::Healthy),
        ("finished", Some(job("FINISHED")), Health::Healthy),
        (
            "suspended on purpose",
            Some(job("SUSPENDED")),
            Health::Healthy,
        ),
        ("restarting", Some(job("RESTARTING")), Health::Healthy),
        ("failed", Some(job("FAILED")), Health::Unhealthy),
        ("failing", Some(job("FAILING")), Health::Unhealthy),
        (
            "lifecycle failed",
            Some(json!({"lifecycleState": "FAILED", "jobStatus": {"state": "RUNNING"}})),
            Health::Unhealthy,
        ),
        (
            "still starting",
            Some(
                json!({"jobStatus": {"state": "CREATED"}, "jobManagerDeploymentStatus": "DEPLOYING"}),
            ),
            Health::Unhealthy,
        ),
        (
            "reconciling",
            Some(json!({"jobStatus": {"state": "RECONCILING"}})),
            Health::Unhealthy,
        ),
        (
            "starting with a published user error",
            Some(json!({"jobStatus": {"state": "RECONCILING"}, "error": "image not found"})),
            Health::Healthy,
        ),
        (
            "jobmanager error",
            Some(
                json!({"jobStatus": {"state": "INITIALIZING"}, "jobManagerDeploymentStatus": "ERROR"}),
            ),
            Health::Healthy,
        ),
        ("empty status", Some(json!({})), Health::Unhealthy),
        ("no status yet", None, Health::Unknown),
    ];
    for (name, status, want) in rows {
        assert_eq!(interpreter.health(&flink(status)), want, "{name}");
    }
    // A session cluster (no job) is healthy once its JobManager is ready.
    let mut session = flink(Some(
        json!({"jobManagerDeploymentStatus": "READY", "lifecycleState": "STABLE"}),
    ));
    session["spec"].as_object_mut().map(|s| s.remove("job"));
    assert_eq!(interpreter.health(&session), Health::Healthy);
    assert!(interpreter.has_health_rule(&Gvk::new("flink.apache.org/v1beta1", "FlinkDeployment")));
}

#[test]
fn flink_replicas_from_parallelism_and_resources() {
    let interpreter = Interpreter::new();
    let (replicas, requires) = interpreter
        .replicas(&flink(None))
        .expect("replicas")
        .expect("workload");
    // One JobManager plus parallelism 2 at Flink's default of one slot per TaskManager.
    assert_eq!(replicas, 3);
    let requires = requires.expect("requirements");
    assert_eq!(requires.resource_request["cpu"].milli_value(), 1000);
    assert_eq!(requires.resource_request["memory"].as_str(), "2048Mi");
    assert_eq!(requires.namespace, "default");

    let mut slots = flink(None);
    slots["spec"]["flinkConfiguration"] = json!({"taskmanager.numberOfTaskSlots": "4"});
    slots["spec"]["job"]["parallelism"] = json!(10);
    slots["spec"]["jobManager"]["replicas"] = json!(2);
    assert_eq!(
        interpreter.replicas(&slots).expect("ok").map(|r| r.0),
        Some(2 + 3)
    );

    let mut fixed = flink(None);
    fixed["spec"]["taskManager"]["replicas"] = json!(5);
    fixed["spec"]["podTemplate"] =
        json!({"spec": {"nodeSelector": {"pool": "flink"}, "priorityClassName": "batch"}});
    let (n, req) = interpreter.replicas(&fixed).expect("ok").expect("workload");
    assert_eq!(n, 6);
    let req = req.expect("requirements");
    assert_eq!(req.priority_class_name, "batch");
    assert_eq!(
        req.node_claim
            .map(|c| c.node_selector["pool"].clone())
            .as_deref(),
        Some("flink")
    );
}

#[test]
fn flink_reflected_status_carries_the_job_id_for_state_preservation() {
    let interpreter = Interpreter::new();
    let mut member = flink(Some(job("RUNNING")));
    member["status"]["unrelated"] = json!("dropped");
    let status = interpreter
        .reflect_status(&member)
        .expect("reflect")
        .expect("status");
    assert_eq!(status["jobStatus"]["jobID"], json!("e8a1b2c3d4"));
    assert!(status.get("unrelated").is_none());
    // The scenario 04 rule reads it.
    assert_eq!(
        jsonpath::eval("{ .jobStatus.jobID }", &status).as_deref(),
        Ok("e8a1b2c3d4")
    );
    assert_eq!(
        interpreter.reflect_status(&flink(None)).expect("none"),
        None
    );
}

#[test]
fn flink_status_aggregation_takes_the_first_reporting_cluster() {
    let interpreter = Interpreter::new();
    let items = vec![
        AggregatedStatusItem {
            cluster_name: "member1".to_string(),
            status: None,
            ..Default::default()
        },
        AggregatedStatusItem {
            cluster_name: "member2".to_string(),
            status: Some(
                json!({"jobStatus": {"jobID": "j2", "state": "RUNNING"}, "lifecycleState": "STABLE", "observedGeneration": 9}),
            ),
            applied: true,
            ..Default::default()
        },
        AggregatedStatusItem {
            cluster_name: "member3".to_string(),
            status: Some(json!({"jobStatus": {"jobID": "j3", "state": "FAILED"}})),
            applied: true,
            ..Default::default()
        },
    ];
    let status = interpreter
        .aggregate_status(&flink(Some(json!({"observedGeneration": 1}))), &items)
        .expect("aggregate")
        .expect("rule");
    assert_eq!(status["jobStatus"]["jobID"], json!("j2"));
    assert_eq!(status["lifecycleState"], json!("STABLE"));
    assert_eq!(
        status["observedGeneration"],
        json!(1),
        "the template's own generation is kept"
    );
}

#[test]
fn flink_dependencies() {
    let interpreter = Interpreter::new();
    let mut obj = flink(None);
    obj["spec"]["serviceAccount"] = json!("flink");
    obj["spec"]["podTemplate"] = json!({"spec": {"containers": [{"name": "flink-main-container", "envFrom": [{"secretRef": {"name": "s3-credentials"}}]}]}});
    obj["spec"]["taskManager"]["podTemplate"] =
        json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "tm-config"}}]}});
    let deps = interpreter.dependencies(&obj).expect("deps");
    let names: Vec<String> = deps
        .iter()
        .map(|d| format!("{}/{}/{}", d.kind, d.namespace, d.name))
        .collect();
    assert_eq!(
        names,
        vec![
            "ServiceAccount/default/flink",
            "Secret/default/s3-credentials",
            "ConfigMap/default/tm-config"
        ]
    );
    assert_eq!(
        interpreter.dependencies(&flink(None)).expect("none"),
        vec![]
    );
}

#[test]
fn a_user_customization_overrides_the_builtin_per_operation() {
    let interpreter = Interpreter::new();
    let gvk = Gvk::new("flink.apache.org/v1beta1", "FlinkDeployment");
    let customization: crate::interpreter::ResourceInterpreterCustomization = serde_yaml_ng::from_str(
        r#"
apiVersion: config.karmada.io/v1alpha1
kind: ResourceInterpreterCustomization
metadata:
  name: my-flink
spec:
  target:
    apiVersion: flink.apache.org/v1beta1
    kind: FlinkDeployment
  customizations:
    healthInterpretation:
      luaScript: |
        function InterpretHealth(observedObj)
          return observedObj.status ~= nil and observedObj.status.jobStatus.state ~= 'FAILED' and observedObj.status.jobStatus.state ~= 'CREATED'
        end
"#,
    )
    .expect("yaml");
    interpreter.add_customization(&customization).expect("add");
    assert_eq!(
        interpreter.rule_source(&gvk, Operation::InterpretHealth),
        Some(RuleSource::Customization("my-flink".to_string()))
    );
    assert_eq!(
        interpreter.rule_source(&gvk, Operation::InterpretReplica),
        Some(RuleSource::BuiltIn(
            "flink.apache.org/v1beta1/FlinkDeployment".to_string()
        ))
    );
    // The built-in calls a published error in a starting job healthy; the user's rule does not.
    let starting = flink(Some(
        json!({"jobStatus": {"state": "CREATED"}, "error": "x"}),
    ));
    assert_eq!(interpreter.health(&starting), Health::Unhealthy);
    assert!(interpreter.remove_customization("my-flink"));
    assert_eq!(interpreter.health(&starting), Health::Healthy);
}
