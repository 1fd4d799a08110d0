//! The member HTTP surface through its router: apply a Deployment, watch its pods become Ready
//! as a fake clock moves, and every fault endpoint, including "unreachable", which holds
//! ordinary requests while the fault API keeps answering.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use chrono::TimeZone;
use flotilla_agent::member::Member;
use flotilla_agent::member_api;
use flotilla_api::Quantity;
use flotilla_member::sim::{SimConfig, SimRuntime};
use flotilla_support::clock::FakeClock;
use serde_json::{json, Value};
use tokio::sync::watch;
use tower::ServiceExt;

struct Fixture {
    app: Router,
    sim: Arc<SimRuntime>,
    clock: Arc<FakeClock>,
    _stop: watch::Sender<bool>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(FakeClock::new(
        chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
    ));
    let config = SimConfig {
        nodes: 2,
        node_cpu: Quantity::parse("4").unwrap(),
        pod_startup_delay: Duration::from_secs(2),
        ..SimConfig::default()
    };
    let sim = SimRuntime::open(config, clock.clone(), None).unwrap();
    let member = Member::new("member1", sim.clone());
    let (stop, stop_rx) = watch::channel(false);
    Fixture {
        app: member_api::router(&[member], stop_rx),
        sim,
        clock,
        _stop: stop,
    }
}

async fn call(app: &Router, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(req))
        .await
        .unwrap_or_else(|_| panic!("{uri} did not answer within 5 s"))
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

fn nginx(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                  "resources": {"requests": {"cpu": "1", "memory": "128Mi"}}}]}}}
    })
}

const DEPLOY: &str = "/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx";

#[tokio::test]
async fn apply_and_pods_become_ready_on_the_fake_clock() {
    let f = fixture();
    let (code, body) = call(&f.app, Method::GET, "/readyz", None).await;
    assert_eq!((code, body), (StatusCode::OK, json!("ok")));
    let (code, applied) = call(&f.app, Method::POST, "/apply", Some(nginx(3))).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(applied["status"]["replicas"], 3);
    assert_eq!(applied["status"]["unavailableReplicas"], 3);

    f.clock.advance(chrono::Duration::milliseconds(1999));
    f.sim.tick();
    let (_, d) = call(&f.app, Method::GET, DEPLOY, None).await;
    assert!(
        d["status"].get("readyReplicas").is_none(),
        "not ready before the delay"
    );
    f.clock.advance(chrono::Duration::milliseconds(1));
    f.sim.tick();
    let (_, d) = call(&f.app, Method::GET, DEPLOY, None).await;
    assert_eq!(d["status"]["readyReplicas"], 3);
    assert_eq!(d["status"]["availableReplicas"], 3);

    let (code, pods) = call(
        &f.app,
        Method::GET,
        "/objects?apiVersion=v1&kind=Pod&namespace=default",
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let pods = pods["items"].as_array().unwrap().clone();
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().all(|p| p["status"]["phase"] == "Running"));

    // The same member under /members/<name>.
    let (code, d2) = call(
        &f.app,
        Method::GET,
        &format!("/members/member1{DEPLOY}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(d2["metadata"]["uid"], d["metadata"]["uid"]);
    let (code, _) = call(&f.app, Method::GET, "/members/nobody/readyz", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (_, members) = call(&f.app, Method::GET, "/members", None).await;
    assert_eq!(members, json!({"members": ["member1"]}));

    let (_, cluster) = call(&f.app, Method::GET, "/cluster", None).await;
    assert_eq!(cluster["kubernetesVersion"], "v1.32.0-sim");
    assert_eq!(cluster["healthy"], true);
    assert_eq!(
        cluster["nodeSummary"],
        json!({"totalNum": 2, "readyNum": 2})
    );
    assert_eq!(cluster["resourceSummary"]["allocatable"]["cpu"], "8");
    assert_eq!(cluster["resourceSummary"]["allocated"]["cpu"], "3");
    assert_eq!(cluster["resourceSummary"]["allocated"]["memory"], "384Mi");
    assert_eq!(cluster["resourceSummary"]["allocated"]["pods"], "3");

    let (code, _) = call(&f.app, Method::DELETE, DEPLOY, None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, status) = call(&f.app, Method::GET, DEPLOY, None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(status["kind"], "Status");
    let (code, _) = call(&f.app, Method::DELETE, DEPLOY, None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (_, pods) = call(&f.app, Method::GET, "/objects?apiVersion=v1&kind=Pod", None).await;
    assert_eq!(pods["items"], json!([]));

    let (code, err) = call(
        &f.app,
        Method::POST,
        "/apply",
        Some(json!({"kind": "ConfigMap"})),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(err["message"].as_str().unwrap().contains("apiVersion"));
    let req = Request::post("/apply").body(Body::from("{nope")).unwrap();
    let resp = f.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn every_fault_endpoint() {
    let f = fixture();
    call(&f.app, Method::POST, "/apply", Some(nginx(2))).await;
    f.clock.advance(chrono::Duration::seconds(2));
    f.sim.tick();

    // unhealthy
    let (code, faults) = call(
        &f.app,
        Method::POST,
        "/faults/unhealthy",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(
        (code, faults["unhealthy"].clone()),
        (StatusCode::OK, json!(true))
    );
    for path in ["/readyz", "/healthz"] {
        let (code, _) = call(&f.app, Method::GET, path, None).await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
    }
    let (_, cluster) = call(&f.app, Method::GET, "/cluster", None).await;
    assert_eq!(cluster["healthy"], false);
    call(
        &f.app,
        Method::POST,
        "/faults/unhealthy",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(
        call(&f.app, Method::GET, "/healthz", None).await.0,
        StatusCode::OK
    );

    // cordon + delete-pods: recreated pods stay Pending.
    let (_, faults) = call(
        &f.app,
        Method::POST,
        "/faults/cordon",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(faults["cordoned"], true);
    let (_, deleted) = call(
        &f.app,
        Method::POST,
        "/faults/delete-pods",
        Some(json!({"namespace": "default", "labelSelector": "app=nginx"})),
    )
    .await;
    assert_eq!(deleted, json!({"deleted": 2}));
    f.clock.advance(chrono::Duration::seconds(10));
    f.sim.tick();
    let (_, d) = call(&f.app, Method::GET, DEPLOY, None).await;
    assert_eq!(d["status"]["unavailableReplicas"], 2);
    let (_, pods) = call(&f.app, Method::GET, "/objects?apiVersion=v1&kind=Pod", None).await;
    assert!(pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["status"]["phase"] == "Pending"));
    call(
        &f.app,
        Method::POST,
        "/faults/cordon",
        Some(json!({"enabled": false})),
    )
    .await;
    let (_, deleted) = call(&f.app, Method::POST, "/faults/delete-pods", Some(json!({}))).await;
    assert_eq!(deleted, json!({"deleted": 2}), "empty selector: all pods");
    let (code, _) = call(
        &f.app,
        Method::POST,
        "/faults/delete-pods",
        Some(json!({"labelSelector": "a in ("})),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    // capacity
    let (_, faults) = call(
        &f.app,
        Method::POST,
        "/faults/capacity",
        Some(json!({"nodes": 1, "cpu": "1", "memory": "1Gi", "pods": 10})),
    )
    .await;
    assert_eq!(
        faults["capacity"],
        json!({"nodes": 1, "cpu": "1", "memory": "1Gi", "pods": "10"})
    );
    f.clock.advance(chrono::Duration::seconds(2));
    f.sim.tick();
    let (_, d) = call(&f.app, Method::GET, DEPLOY, None).await;
    assert_eq!(
        (
            d["status"]["readyReplicas"].clone(),
            d["status"]["unavailableReplicas"].clone()
        ),
        (json!(1), json!(1))
    );
    let (_, cluster) = call(&f.app, Method::GET, "/cluster", None).await;
    assert_eq!(
        cluster["resourceSummary"]["allocatable"],
        json!({"cpu": "1", "memory": "1Gi", "pods": "10"})
    );
    assert_eq!(cluster["resourceSummary"]["allocating"]["pods"], "1");

    // status of any object; it sticks for kinds the sim does not compute.
    call(&f.app, Method::POST, "/apply", Some(json!({"apiVersion": "flink.apache.org/v1beta1",
        "kind": "FlinkDeployment", "metadata": {"name": "wc", "namespace": "default"}, "spec": {}}))).await;
    let (code, obj) = call(
        &f.app,
        Method::POST,
        "/faults/status",
        Some(json!({
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment", "namespace": "default",
        "name": "wc", "status": {"jobStatus": {"jobID": "j-1", "state": "RUNNING"}}})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(obj["status"]["jobStatus"]["jobID"], "j-1");
    f.clock.advance(chrono::Duration::seconds(30));
    f.sim.tick();
    let (_, obj) = call(&f.app, Method::GET,
        "/objects?apiVersion=flink.apache.org/v1beta1&kind=FlinkDeployment&namespace=default&name=wc", None).await;
    assert_eq!(
        obj["status"]["jobStatus"],
        json!({"jobID": "j-1", "state": "RUNNING"})
    );
    let (code, _) = call(
        &f.app,
        Method::POST,
        "/faults/status",
        Some(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "missing", "status": {}})),
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (_, faults) = call(&f.app, Method::GET, "/faults", None).await;
    assert_eq!(faults["statusOverrides"][0]["name"], "wc");
    let (code, _) = call(
        &f.app,
        Method::POST,
        "/faults/cordon",
        Some(json!({"on": true})),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unreachable_holds_requests_but_not_the_fault_api() {
    let f = fixture();
    let (_, faults) = call(
        &f.app,
        Method::POST,
        "/faults/unreachable",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(faults["unreachable"], true);
    // Ordinary requests hang...
    let held = {
        let app = f.app.clone();
        tokio::spawn(async move {
            app.oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
                .await
                .unwrap()
                .status()
        })
    };
    for path in ["/healthz", "/cluster", DEPLOY] {
        let req = Request::get(path).body(Body::empty()).unwrap();
        let answered =
            tokio::time::timeout(Duration::from_millis(200), f.app.clone().oneshot(req)).await;
        assert!(answered.is_err(), "{path} answered while unreachable");
    }
    // ...while every fault endpoint keeps answering.
    let (code, faults) = call(&f.app, Method::GET, "/faults", None).await;
    assert_eq!(
        (code, faults["unreachable"].clone()),
        (StatusCode::OK, json!(true))
    );
    let (code, _) = call(
        &f.app,
        Method::POST,
        "/faults/cordon",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = call(
        &f.app,
        Method::POST,
        "/members/member1/faults/unhealthy",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert!(!held.is_finished());
    // Lifting the fault releases the held request.
    call(
        &f.app,
        Method::POST,
        "/faults/unreachable",
        Some(json!({"enabled": false})),
    )
    .await;
    let status = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("the held request did not finish within 5 s after the fault was lifted")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn many_members_are_served_under_their_names_only() {
    let clock = Arc::new(FakeClock::new(
        chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
    ));
    let members: Vec<Arc<Member>> = ["member1", "member2"]
        .iter()
        .map(|n| {
            Member::new(
                n,
                SimRuntime::open(SimConfig::default(), clock.clone(), None).unwrap(),
            )
        })
        .collect();
    let (_stop, rx) = watch::channel(false);
    let app = member_api::router(&members, rx);
    assert_eq!(
        call(&app, Method::GET, "/readyz", None).await.0,
        StatusCode::NOT_FOUND
    );
    call(
        &app,
        Method::POST,
        "/members/member2/faults/unhealthy",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(
        call(&app, Method::GET, "/members/member1/readyz", None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&app, Method::GET, "/members/member2/readyz", None)
            .await
            .0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let (code, _) = call(&app, Method::POST, "/members/member1/apply", Some(nginx(1))).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = call(
        &app,
        Method::GET,
        &format!("/members/member2{DEPLOY}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "members do not share objects");
}
