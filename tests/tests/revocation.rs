//! Revocation end to end, with the real binaries on 127.0.0.1: a pull member registers and
//! receives a Secret through a Work; an admin allows one new registration of it, and the join
//! token registers it again. From then on its former credential is 401, with a Kubernetes
//! `Status`, on every path: discovery, OpenAPI, the probes, its Cluster, its Lease, its Works
//! and their status, the Secret's namespace, Events, metrics, registration; a watch it opened
//! before ends with a 401 `ERROR` event. The new credential keeps working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, post_manifests, pull_agent, works_on, ApiClient, Server};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

const CLUSTER: &str = "/apis/cluster.karmada.io/v1alpha1/clusters/m1";
const WORKS: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases/m1";
const SECRETS: &str = "/api/v1/namespaces/karmada-es-m1/secrets";

const SECRET_TO_M1: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: db-password
stringData:
  password: hunter2
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: db-password
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: Secret
      name: db-password
  placement:
    clusterAffinity:
      clusterNames: [m1]
"#;

/// A blocking client of `server` that trusts its certificate.
fn http(server: &Server) -> reqwest::blocking::Client {
    let ca = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Opens a watch of m1's Works with `token`; its lines arrive on the channel (the channel
/// closes when the stream ends).
fn watch_works(server: &Server, token: &str) -> mpsc::Receiver<String> {
    let resp = http(server)
        .get(format!("{}{WORKS}?watch=true", server.url))
        .bearer_auth(token)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "opening the watch");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(resp).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next line of a watch, or why there is none within `deadline`.
fn next_line(watch: &mpsc::Receiver<String>, what: &str, deadline: Duration) -> Option<Value> {
    match watch.recv_timeout(deadline) {
        Ok(line) => Some(serde_json::from_str(&line).unwrap()),
        Err(mpsc::RecvTimeoutError::Disconnected) => None,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: nothing within {deadline:?}"),
    }
}

#[test]
fn a_re_registered_members_former_credential_is_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let agents = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).unwrap();
    let admin = ApiClient::admin(&server).unwrap();
    let _agent = pull_agent(&server, "m1", agents.path());
    let old = eventually("m1's stored credential", Duration::from_secs(60), || {
        std::fs::read_to_string(agents.path().join("m1").join("credential")).ok()
    });
    let old = old.trim().to_string();

    // A Secret reaches m1's execution namespace in a Work, which the old credential reads.
    post_manifests(&admin, SECRET_TO_M1);
    let work = eventually(
        "a Work of the Secret for m1",
        Duration::from_secs(60),
        || {
            works_on(&admin, "m1")
                .into_iter()
                .find(|w| {
                    w.pointer("/spec/workload/manifests/0/kind") == Some(&json!("Secret"))
                        && w.pointer("/spec/workload/manifests/0/metadata/name")
                            == Some(&json!("db-password"))
                })
                .and_then(|w| w.pointer("/metadata/name")?.as_str().map(String::from))
        },
    );
    let work_path = format!("{WORKS}/{work}");
    let before = ApiClient::with_token(&server, &old).unwrap();
    assert_eq!(before.send("GET", &work_path, None).unwrap().0, 200);
    let watch = watch_works(&server, &old);
    let first = next_line(&watch, "the Work's ADDED event", Duration::from_secs(30));
    assert_eq!(
        first.as_ref().map(|e| e["type"].clone()),
        Some(json!("ADDED"))
    );

    // An admin allows one new registration of m1, and the join token makes it.
    let allow = json!({"metadata": {"annotations": {"flotilla.io/allow-reregistration": "true"}}});
    assert_eq!(admin.send("PATCH", CLUSTER, Some(&allow)).unwrap().0, 200);
    let new = flotilla_tests::register_member(&server, "m1");
    assert_ne!(new, old);

    // The watch the old credential opened ends with a 401 ERROR event.
    let mut last = None;
    while let Some(event) = next_line(&watch, "the end of the old watch", Duration::from_secs(30)) {
        last = Some(event);
    }
    let last = last.expect("the old watch ended without an event");
    assert_eq!(last["type"], "ERROR", "{last}");
    assert_eq!(last["object"]["kind"], "Status", "{last}");
    assert_eq!(last["object"]["code"], 401, "{last}");

    // Every path: (method, path, body, what the new credential gets).
    let lease_patch = json!({"spec": {"renewTime": chrono::Utc::now().to_rfc3339_opts(
        chrono::SecondsFormat::Micros, true)}});
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "m1-revocation-test", "namespace": "karmada-es-m1"},
        "involvedObject": {"kind": "Work", "name": work, "namespace": "karmada-es-m1"},
        "reason": "Applied", "message": "applied", "type": "Normal",
    });
    let registration = json!({"clusterName": "m1"});
    let table: Vec<(&str, String, Option<Value>, u16)> = vec![
        // Discovery and OpenAPI.
        ("GET", "/api".into(), None, 200),
        ("GET", "/api/v1".into(), None, 200),
        ("GET", "/apis".into(), None, 200),
        ("GET", "/apis/work.karmada.io".into(), None, 200),
        ("GET", "/apis/work.karmada.io/v1alpha1".into(), None, 200),
        ("GET", "/openapi/v2".into(), None, 404),
        ("GET", "/openapi/v3".into(), None, 200),
        (
            "GET",
            "/openapi/v3/apis/work.karmada.io/v1alpha1".into(),
            None,
            200,
        ),
        // The probes answer anonymous calls, never a revoked credential.
        ("GET", "/version".into(), None, 200),
        ("GET", "/healthz".into(), None, 200),
        ("GET", "/readyz".into(), None, 200),
        ("GET", "/livez".into(), None, 200),
        // Its Cluster and Lease.
        ("GET", CLUSTER.into(), None, 200),
        ("GET", format!("{CLUSTER}/status"), None, 200),
        ("PATCH", format!("{CLUSTER}/status"), Some(json!({})), 200),
        ("GET", LEASE.into(), None, 200),
        ("PATCH", LEASE.into(), Some(lease_patch), 200),
        // Its Works, the Secret's Work among them, and their status.
        ("GET", WORKS.into(), None, 200),
        (
            "GET",
            format!("{WORKS}?watch=true&timeoutSeconds=1"),
            None,
            200,
        ),
        ("GET", work_path.clone(), None, 200),
        ("PATCH", work_path.clone(), Some(json!({})), 200),
        ("GET", format!("{work_path}/status"), None, 200),
        ("PATCH", format!("{work_path}/status"), Some(json!({})), 200),
        // The Secrets of its namespace are no agent's to read.
        ("GET", SECRETS.into(), None, 403),
        ("GET", format!("{SECRETS}/db-password"), None, 403),
        ("GET", format!("{SECRETS}?watch=true"), None, 403),
        // Events, metrics, what does not exist, registration.
        (
            "POST",
            "/api/v1/namespaces/karmada-es-m1/events".into(),
            Some(event),
            201,
        ),
        ("GET", "/metrics".into(), None, 403),
        ("GET", "/no/such/path".into(), None, 403),
        (
            "POST",
            "/flotilla/v1/register".into(),
            Some(registration),
            401,
        ),
    ];
    let old_api = ApiClient::with_token(&server, &old).unwrap();
    let new_api = ApiClient::with_token(&server, &new).unwrap();
    let mut wrong = Vec::new();
    for (method, path, body, want_new) in &table {
        let (code, status) = old_api.send(method, path, body.as_ref()).unwrap();
        let is_status = status["kind"] == "Status" && status["code"] == 401;
        if code != 401 || !is_status {
            wrong.push(format!("old {method} {path}: {code} {status}"));
        }
        let (code, answer) = new_api.send(method, path, body.as_ref()).unwrap();
        if code != *want_new {
            wrong.push(format!(
                "new {method} {path}: {code}, want {want_new}: {answer}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The new credential watches what the old one no longer may.
    let watch = watch_works(&server, &new);
    let first = next_line(
        &watch,
        "the new watch's ADDED event",
        Duration::from_secs(30),
    );
    assert_eq!(
        first.as_ref().map(|e| e["type"].clone()),
        Some(json!("ADDED"))
    );
}
