//! kubectl (the real binary) against a real `flotilla-server` process: create and apply the
//! failover scenarios, get in every output form, watch, patch, delete, and the cluster table.
//! Without kubectl the tests fail, naming `scripts/setup.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, require_kubectl, scenarios_dir, Kubectl, Process, Server};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

const FLINK_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: flinkdeployments.flink.apache.org
spec:
  group: flink.apache.org
  scope: Namespaced
  names:
    plural: flinkdeployments
    singular: flinkdeployment
    kind: FlinkDeployment
  versions:
    - name: v1beta1
      served: true
      storage: true
      subresources:
        status: {}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

const CLUSTER: &str = r#"apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: member1
  labels:
    region: eu
spec:
  syncMode: Push
  apiEndpoint: http://127.0.0.1:1
"#;

const OBJECTS: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: nginx
---
apiVersion: v1
kind: Namespace
metadata:
  name: other
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: other
data:
  a: "1"
"#;

/// A server and a kubectl for it; fails (naming the install script) without kubectl.
fn start() -> (Server, Kubectl, tempfile::TempDir) {
    require_kubectl();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).unwrap();
    let kubectl = Kubectl::new(&server).unwrap();
    (server, kubectl, dir)
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().to_string()
}

#[test]
fn scenarios_create_apply_and_server_side_apply() {
    let (_server, k, dir) = start();
    let scenarios = scenarios_dir();
    let crd = write(dir.path(), "crd.yaml", FLINK_CRD);
    k.run(&["apply", "-f", &crd]).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(&scenarios)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    for file in &files {
        let f = file.to_string_lossy().to_string();
        let out = k.run(&["create", "-f", &f]).unwrap();
        assert!(out.contains("created"), "{f}: {out}");
        // Client-side apply over a created object, twice (the second time with a change).
        k.run(&["apply", "-f", &f]).unwrap();
        let changed = std::fs::read_to_string(file)
            .unwrap()
            .replace("tolerationSeconds: 120", "tolerationSeconds: 150");
        let changed_path = write(dir.path(), "changed.yaml", &changed);
        k.run(&["apply", "-f", &changed_path]).unwrap();
        k.run(&["apply", "--server-side", "--force-conflicts", "-f", &f])
            .unwrap();
        let pp = k.run(&["get", "pp", "-o", "json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&pp).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 1, "{f}: {pp}");
        k.run(&["delete", "-f", &f]).unwrap();
    }
    // Apply from nothing (creates), then again unchanged.
    let f = files[1].to_string_lossy().to_string();
    assert!(k.run(&["apply", "-f", &f]).unwrap().contains("created"));
    assert!(k.run(&["apply", "-f", &f]).unwrap().contains("unchanged"));
    let rb = k
        .run(&["get", "pp", "nginx-propagation", "-o", "yaml"])
        .unwrap();
    assert!(rb.contains("staticWeightList"), "{rb}");
}

#[test]
fn get_in_every_form_watch_patch_delete() {
    let (_server, k, dir) = start();
    let cluster = write(dir.path(), "cluster.yaml", CLUSTER);
    k.run(&["create", "-f", &cluster]).unwrap();
    let table = k.run(&["get", "clusters"]).unwrap();
    let header = table.lines().next().unwrap();
    for col in ["NAME", "VERSION", "MODE", "READY", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    assert!(
        table.contains("member1") && table.contains("Push"),
        "{table}"
    );
    let wide = k.run(&["get", "cluster", "-o", "wide"]).unwrap();
    assert!(
        wide.contains("API-ENDPOINT") && wide.contains("http://127.0.0.1:1"),
        "{wide}"
    );
    let yaml = k.run(&["get", "cluster", "member1", "-o", "yaml"]).unwrap();
    assert!(yaml.contains("syncMode: Push"), "{yaml}");
    let by_label = k
        .run(&["get", "clusters", "-l", "region=eu", "-o", "name"])
        .unwrap();
    assert_eq!(by_label.trim(), "cluster.cluster.karmada.io/member1");
    let none = k
        .run(&["get", "clusters", "-l", "region=us", "-o", "name"])
        .unwrap();
    assert_eq!(none.trim(), "");

    let objects = write(dir.path(), "objects.yaml", OBJECTS);
    k.run(&["apply", "-f", &objects]).unwrap();
    let all = k.run(&["get", "deployments,configmaps", "-A"]).unwrap();
    assert!(
        all.contains("NAMESPACE") && all.contains("web") && all.contains("cfg"),
        "{all}"
    );
    let json = k.run(&["get", "deploy", "web", "-o", "json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["spec"]["replicas"], 2);

    // Patches as `kubectl edit` and friends send them.
    k.run(&["patch", "deploy", "web", "-p", r#"{"spec":{"replicas":3}}"#])
        .unwrap();
    k.run(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    ])
    .unwrap();
    k.run(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":4}]"#,
    ])
    .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&k.run(&["get", "deploy", "web", "-o", "json"]).unwrap()).unwrap();
    assert_eq!(v["spec"]["replicas"], 4);
    assert_eq!(v["metadata"]["labels"]["x"], "y");
    k.run(&["label", "cluster", "member1", "tier=gold"])
        .unwrap();
    k.run(&["annotate", "deploy", "web", "note=hello"]).unwrap();

    // get -w receives an event.
    let watched = write(
        dir.path(),
        "watched.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  a: \"1\"\n",
    );
    // Killed when dropped, also when the wait below fails.
    let mut watch = Process {
        child: k
            .command(&[
                "get",
                "configmaps",
                "-w",
                "--output-watch-events",
                "-o",
                "name",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
        name: "kubectl get -w".into(),
    };
    let stdout = watch.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    eventually(
        "kubectl get -w to print the new configmap",
        Duration::from_secs(30),
        || {
            if seen.is_empty() {
                // Create after the watch is up; repeat harmlessly until it is seen.
                let _ = k.output(&["apply", "-f", &watched]);
            }
            while let Ok(line) = rx.try_recv() {
                seen.push(line);
            }
            seen.iter()
                .find(|l| l.contains("configmap/watched"))
                .cloned()
        },
    );
    drop(watch);

    k.run(&["delete", "deploy", "web"]).unwrap();
    let out = k.output(&["get", "deploy", "web"]).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound")
            || String::from_utf8_lossy(&out.stderr).contains("not found")
    );
    // Invalid objects are rejected with the field named.
    let bad = write(dir.path(), "bad.yaml", "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: bad\nspec:\n  resourceSelectors:\n    - apiVersion: apps/v1\n      kind: Deployment\n  placement:\n    spreadConstraints:\n      - spreadByField: region\n");
    let out = k.output(&["create", "-f", &bad]).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.placement.spreadConstraints"), "{err}");
    // Unknown fields of Flotilla's kinds are rejected by kubectl's default (Strict) validation.
    let typo = write(dir.path(), "typo.yaml", "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: typo\nspec:\n  resourceSelectors:\n    - apiVersion: apps/v1\n      kind: Deployment\n  placment: {}\n");
    let out = k.output(&["create", "-f", &typo]).unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("placment"));
}

#[test]
fn get_events_prints_the_kubernetes_columns() {
    let (_server, k, dir) = start();
    // Years old: kubectl prints such ages in whole years ("26y").
    let event = "apiVersion: v1\nkind: Event\nmetadata:\n  name: nginx.17\n  namespace: default\n\
         involvedObject:\n  apiVersion: apps/v1\n  kind: Deployment\n  name: nginx\n  namespace: default\n\
         reason: ScheduleBindingSucceed\nmessage: Binding has been scheduled\ntype: Normal\n\
         source:\n  component: default-scheduler\ncount: 2\n\
         firstTimestamp: \"1990-01-01T00:00:00Z\"\nlastTimestamp: \"2000-01-01T00:00:00Z\"\n";
    let file = write(dir.path(), "event.yaml", event);
    k.run(&["create", "-f", &file]).unwrap();
    let table = k.run(&["get", "events"]).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{table}"
    );
    let row = lines
        .find(|l| l.contains("ScheduleBindingSucceed"))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    let years = cells[0]
        .strip_suffix('y')
        .and_then(|y| y.parse::<u32>().ok());
    assert!(
        years.is_some_and(|y| y >= 25),
        "LAST SEEN as an age: {table}"
    );
    assert_eq!(
        cells[1..],
        [
            "Normal",
            "ScheduleBindingSucceed",
            "deployment/nginx",
            "Binding",
            "has",
            "been",
            "scheduled"
        ],
        "{table}"
    );
    let wide = k.run(&["get", "events", "-o", "wide"]).unwrap();
    let header = wide.lines().next().unwrap();
    for col in ["SUBOBJECT", "SOURCE", "FIRST SEEN", "COUNT", "NAME"] {
        assert!(header.contains(col), "{wide}");
    }
    assert!(
        wide.contains("default-scheduler") && wide.contains("nginx.17"),
        "{wide}"
    );
}
