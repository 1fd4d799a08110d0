//! Every resource request runs under `--request-timeout-seconds`, the computed kinds and
//! subresources (api/computed/mod.rs) as well as the stored kinds: past the deadline the answer is
//! a 504 `Status`, on time, whatever the handler was waiting for. The failover dry-run computes
//! on a blocking thread: a slow one is cut off at the deadline while the server goes on serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{assert_status, TestApi, TOKEN};
use flotilla_api::kinds::{well_known, ResourceType};
use flotilla_server::api::computed::simulation::DryRun;
use flotilla_server::controllers::failover::brake::EvictionBrake;
use flotilla_server::controllers::settings::BrakeSettings;
use flotilla_server::store::{
    DeleteOptions, Deleted, ListOptions, ObjectList, Store, StoreError, WatchOptions,
    WatchProgress, WatchStream,
};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt;

const SIMS: &str = "/apis/flotilla.io/v1alpha1/failoversimulations";
const BINDINGS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// The longest a test waits for anything; past it the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(20);

/// A store whose reads of the held kinds (by plural) never answer, as a store stuck on a slow
/// disk would; everything else goes to the store below.
struct HeldStore {
    inner: Arc<dyn Store>,
    held: Arc<Mutex<HashSet<String>>>,
}

impl HeldStore {
    async fn hold_if_held(&self, res: &ResourceType) {
        if self.held.lock().contains(&res.plural) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl Store for HeldStore {
    async fn create(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner.create(res, obj).await
    }
    async fn get(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.hold_if_held(res).await;
        self.inner.get(res, namespace, name).await
    }
    async fn get_shared(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        self.hold_if_held(res).await;
        self.inner.get_shared(res, namespace, name).await
    }
    async fn list(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        self.hold_if_held(res).await;
        self.inner.list(res, namespace, opts).await
    }
    async fn update(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner.update(res, obj).await
    }
    async fn update_status(&self, res: &ResourceType, obj: Value) -> Result<Value, StoreError> {
        self.inner.update_status(res, obj).await
    }
    async fn update_with_status(
        &self,
        res: &ResourceType,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        self.inner.update_with_status(res, obj).await
    }
    async fn delete(
        &self,
        res: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, StoreError> {
        self.inner.delete(res, namespace, name, opts).await
    }
    async fn list_dependents(
        &self,
        res: &ResourceType,
        owner_uid: &str,
    ) -> Result<Vec<Value>, StoreError> {
        self.inner.list_dependents(res, owner_uid).await
    }
    async fn watch_with_progress(
        &self,
        res: &ResourceType,
        opts: WatchOptions,
    ) -> Result<(WatchStream, WatchProgress), StoreError> {
        self.inner.watch_with_progress(res, opts).await
    }
    async fn kind_revision(&self, res: &ResourceType) -> Result<u64, StoreError> {
        self.inner.kind_revision(res).await
    }
    async fn current_resource_version(&self) -> Result<u64, StoreError> {
        self.inner.current_resource_version().await
    }
    async fn object_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.inner.object_counts().await
    }
    fn durability_counts(&self) -> (u64, u64) {
        self.inner.durability_counts()
    }
    async fn close(&self) -> Result<(), StoreError> {
        self.inner.close().await
    }
}

/// A Ready cluster, a ResourceBinding placed on it and a Deployment.
async fn objects(api: &TestApi) {
    let mut c = api
        .store
        .create(
            &well_known::clusters(),
            json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                   "metadata": {"name": "member1"}, "spec": {"syncMode": "Pull"}}),
        )
        .await
        .unwrap();
    c["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    api.store
        .update_status(&well_known::clusters(), c)
        .await
        .unwrap();
    api.store
        .create(
            &well_known::resource_bindings(),
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": "web-deployment", "namespace": "default"},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "namespace": "default", "name": "web"},
                         "replicas": 1, "clusters": [{"name": "member1", "replicas": 1}]}}),
        )
        .await
        .unwrap();
    let (code, body) = api
        .call(
            "POST",
            DEPLOYMENTS,
            Some(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}}}}})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

fn simulation_request() -> Value {
    json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "FailoverSimulation",
           "metadata": {"name": "member1-down"}, "spec": {"failedClusters": ["member1"]}})
}

/// Sends `method path` (with a JSON `body`) and answers the status, the body and how long the
/// answer took; a request that gets no answer within [`PATIENCE`] fails the test.
async fn timed(
    api: &TestApi,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value, Duration) {
    let started = Instant::now();
    let (code, body) = tokio::time::timeout(PATIENCE, api.call(method, path, body))
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within {PATIENCE:?}"));
    (code, body, started.elapsed())
}

#[tokio::test]
async fn computed_kinds_and_subresources_answer_504_at_the_deadline() {
    let deadline = Duration::from_millis(300);
    let held = Arc::new(Mutex::new(HashSet::new()));
    let api = TestApi::with_parts(
        |c| c.limits.request_timeout = deadline,
        {
            let held = held.clone();
            |inner| Arc::new(HeldStore { inner, held })
        },
        // A partition brake, as the controllers give the API, so `evictionbrakes` reads the
        // clusters.
        |state| {
            state.eviction_brake.fill(EvictionBrake::new(
                BrakeSettings::default(),
                chrono::Utc::now(),
                None,
            ))
        },
    )
    .await;
    objects(&api).await;
    let requests: [(&str, String, Option<Value>); 6] = [
        (
            "GET",
            "/apis/flotilla.io/v1alpha1/evictionbrakes".into(),
            None,
        ),
        ("GET", "/apis/flotilla.io/v1alpha1/failovers".into(), None),
        ("GET", format!("{BINDINGS}/web-deployment/explain"), None),
        ("GET", format!("{DEPLOYMENTS}/web/scale"), None),
        ("POST", SIMS.into(), Some(simulation_request())),
        // A stored kind, under the deadline before this change too.
        ("GET", format!("{DEPLOYMENTS}/web"), None),
    ];
    // Each answers at once while the store answers...
    for (method, path, body) in &requests {
        let (code, answer, _) = timed(&api, method, path, body.clone()).await;
        assert!(code.is_success(), "{method} {path}: {code} {answer}");
    }
    // ...and with a 504 at the deadline while the store does not.
    for plural in ["clusters", "resourcebindings", "deployments"] {
        held.lock().insert(plural.to_string());
    }
    for (method, path, body) in &requests {
        let (code, answer, took) = timed(&api, method, path, body.clone()).await;
        assert_eq!(
            code,
            StatusCode::GATEWAY_TIMEOUT,
            "{method} {path}: {answer}"
        );
        assert_status(&answer, 504, "Timeout");
        assert!(
            took >= deadline && took < deadline + Duration::from_secs(5),
            "{method} {path}: answered after {took:?}, the deadline is {deadline:?}"
        );
    }
}

/// The failover dry-run's computation, held until the test lets it go.
struct HeldDryRun {
    /// Told when a computation starts.
    started: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// Lets the held computation go on.
    release: std::sync::mpsc::Sender<()>,
    /// Whether a computation has ended.
    ended: Arc<AtomicBool>,
}

fn held_dry_run() -> (DryRun, HeldDryRun) {
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let ended = Arc::new(AtomicBool::new(false));
    let ended_by = ended.clone();
    let dry_run = DryRun::new(move |input| {
        let _ = started_tx.send(());
        // Bounded, so a failing test ends instead of leaving the thread behind for good.
        let _ = release_rx.lock().recv_timeout(PATIENCE);
        let answer = input.simulate();
        ended_by.store(true, Ordering::SeqCst);
        answer
    });
    (
        dry_run,
        HeldDryRun {
            started,
            release,
            ended,
        },
    )
}

/// The runtime of this test has one thread, so a dry-run computed on it would stop every
/// other request and the deadline itself until it ended.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_dry_run_is_504_at_the_deadline_while_the_server_serves_others() {
    let deadline = Duration::from_millis(300);
    let (dry_run, mut held) = held_dry_run();
    let api = TestApi::with_parts(
        |c| c.limits.request_timeout = deadline,
        |store| store,
        |state| state.dry_run = dry_run,
    )
    .await;
    objects(&api).await;

    let request = Request::builder()
        .method("POST")
        .uri(SIMS)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(simulation_request().to_string()))
        .unwrap();
    let router = api.router.clone();
    let sent = Instant::now();
    let simulation = tokio::spawn(async move {
        let response = router.oneshot(request).await.unwrap();
        let code = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            code,
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            sent.elapsed(),
        )
    });
    tokio::time::timeout(PATIENCE, held.started.recv())
        .await
        .expect("the dry-run did not start its computation")
        .expect("the dry-run's computation is gone");

    // While the computation is held, the server answers other requests.
    let (code, list, took) = timed(&api, "GET", BINDINGS, None).await;
    assert_eq!(code, StatusCode::OK, "{list}");
    assert_eq!(list["items"][0]["metadata"]["name"], "web-deployment");
    assert!(
        took < deadline,
        "a list took {took:?} beside a held dry-run"
    );

    // The dry-run answers 504 at its deadline, before its computation ends.
    let (code, answer, took) = tokio::time::timeout(PATIENCE, simulation)
        .await
        .expect("the dry-run got no answer")
        .unwrap();
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{answer}");
    assert_status(&answer, 504, "Timeout");
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(5),
        "answered after {took:?}, the deadline is {deadline:?}"
    );
    assert!(
        !held.ended.load(Ordering::SeqCst),
        "the answer waited for the computation"
    );

    // Let go, the computation ends on its blocking thread; nobody waits for its answer.
    held.release.send(()).unwrap();
    let gave_up = Instant::now() + PATIENCE;
    while !held.ended.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < gave_up,
            "the computation did not end once let go"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The next dry-run, not held, answers.
    held.release.send(()).unwrap();
    let (code, answer, _) = timed(&api, "POST", SIMS, Some(simulation_request())).await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["status"]["summary"]["bindings"], 1, "{answer}");
}
