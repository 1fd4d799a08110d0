//! A small fake Flotilla server for the pull-loop tests: registration with a join token,
//! scoped credentials, Cluster get/put(status), Lease get/create/update, Work list/watch
//! (with an event log that can be compacted to force 410) and get/put/patch/status, Event
//! create. Objects carry resourceVersions and stale writes answer 409, like the real server.
//! It counts what it serves (reads, writes, lists, watches, failed TLS handshakes), so a test
//! can wait until the agent provably ran a loop before asserting that the loop did nothing.
//! One fake server can listen on several addresses ([`FakeServer::listen`]), like several
//! servers sharing one store; each [`Listener`] counts what it served, can answer an error
//! status to everything, stop answering, or stop as a killed process does.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::result_large_err
)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub const JOIN_TOKEN: &str = "join-secret";

type Key = (&'static str, String, String);

/// Items per page of a Works list that asks for a limit.
pub const FAKE_PAGE: usize = 2;

#[derive(Default)]
pub struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    /// Work events: (rv, type, object).
    log: Vec<(u64, String, Value)>,
    /// Oldest resourceVersion a watch may resume from.
    min_rv: u64,
    watchers: Vec<(String, mpsc::UnboundedSender<String>)>,
    credentials: HashMap<String, String>,
    pub registrations: usize,
    pub registered_bodies: Vec<Value>,
    pub lease_writes: usize,
    /// When each lease write was served.
    pub lease_write_times: Vec<tokio::time::Instant>,
    pub cluster_status_writes: usize,
    /// GETs of a Cluster: each cluster-status pass of the agent starts with one.
    pub cluster_reads: usize,
    /// TLS handshakes that failed (see [`FakeServer::serve_tls`]).
    pub tls_handshake_failures: usize,
    pub work_status_writes: usize,
    /// List requests (each page counts).
    pub lists: usize,
    /// List requests that asked for a page (`limit`).
    pub paged_lists: usize,
    pub watches: usize,
    pub events: Vec<Value>,
    pub tokens_seen: HashSet<String>,
    /// While set, Work status writes wait for a permit of this semaphore before they are
    /// served (see [`FakeServer::hold_status_writes`]).
    status_hold: Option<Arc<tokio::sync::Semaphore>>,
    /// Status writes that arrived and wait at the hold.
    pub status_writes_held: usize,
    /// The `Flotilla-Member-Timing` header put on every answer (none when `None`), as the
    /// real server advertises its member timing.
    pub advertised_timing: Option<String>,
}

#[derive(Clone, Default)]
pub struct FakeServer {
    pub inner: Arc<Mutex<Inner>>,
}

async fn advertise_timing(State(s): State<FakeServer>, mut response: Response) -> Response {
    if let Some(value) = s.inner.lock().advertised_timing.clone() {
        if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert("flotilla-member-timing", value);
        }
    }
    response
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    (
        code,
        Json(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "message": message, "code": code.as_u16()}),
        ),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string()
}

impl FakeServer {
    pub fn new() -> Self {
        FakeServer::default()
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/flotilla/v1/register", post(register))
            .route(
                "/apis/cluster.karmada.io/v1alpha1/clusters/{name}",
                get(get_cluster).put(put_cluster),
            )
            .route(
                "/apis/cluster.karmada.io/v1alpha1/clusters/{name}/status",
                get(get_cluster).put(put_cluster_status),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                post(create_lease),
            )
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                get(get_lease).put(put_lease),
            )
            .route(
                "/apis/work.karmada.io/v1alpha1/namespaces/{ns}/works",
                get(list_works),
            )
            .route(
                "/apis/work.karmada.io/v1alpha1/namespaces/{ns}/works/{name}",
                get(get_work).put(put_work).patch(patch_work),
            )
            .route(
                "/apis/work.karmada.io/v1alpha1/namespaces/{ns}/works/{name}/status",
                axum::routing::put(put_work_status),
            )
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .with_state(self.clone())
            .layer(axum::middleware::map_response_with_state(
                self.clone(),
                advertise_timing,
            ))
    }

    /// Puts `header` (a `Flotilla-Member-Timing` value) on every later answer.
    pub fn advertise_timing(&self, header: &str) {
        self.inner.lock().advertised_timing = Some(header.to_string());
    }

    /// Serves plain HTTP on 127.0.0.1:0.
    pub async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = self.router();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }

    /// Serves plain HTTP on another address of 127.0.0.1:0, as one more server of the same
    /// store would; the [`Listener`] stops it (also when dropped).
    pub async fn listen(&self) -> Listener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(ListenerState::default());
        let app = self.router().layer(axum::middleware::from_fn_with_state(
            state.clone(),
            through_listener,
        ));
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp(listener)
            .unwrap()
            .handle(handle.clone());
        tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
        Listener {
            addr,
            state,
            handle,
        }
    }

    /// Serves HTTPS on `listener` with the given certificate and key (PEM), counting failed
    /// handshakes in `tls_handshake_failures`.
    pub async fn serve_tls(&self, listener: std::net::TcpListener, cert_pem: &str, key_pem: &str) {
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
            cert_pem.as_bytes().to_vec(),
            key_pem.as_bytes().to_vec(),
        )
        .await
        .unwrap();
        listener.set_nonblocking(true).unwrap();
        let acceptor = CountingTls {
            tls: axum_server::tls_rustls::RustlsAcceptor::new(tls),
            server: self.clone(),
        };
        let app = self.router();
        let server = axum_server::from_tcp(listener).unwrap().acceptor(acceptor);
        tokio::spawn(async move {
            let _ = server.serve(app.into_make_service()).await;
        });
    }

    fn next_rv(inner: &mut Inner) -> u64 {
        inner.rv += 1;
        inner.rv
    }

    fn emit(inner: &mut Inner, type_: &str, obj: &Value) {
        let rv = inner.rv;
        inner.log.push((rv, type_.to_string(), obj.clone()));
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let line = format!("{}\n", json!({"type": type_, "object": obj}));
        inner
            .watchers
            .retain(|(w_ns, tx)| *w_ns != ns || tx.send(line.clone()).is_ok());
    }

    /// Makes Work status writes wait (unanswered) until [`FakeServer::release_status_writes`].
    pub fn hold_status_writes(&self) {
        self.inner.lock().status_hold = Some(Arc::new(tokio::sync::Semaphore::new(0)));
    }

    /// Serves the held status writes and every later one.
    pub fn release_status_writes(&self) {
        if let Some(hold) = self.inner.lock().status_hold.take() {
            hold.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
        }
    }

    /// Creates or replaces a Work (as the server's binding controller would).
    pub fn put_work(
        &self,
        cluster: &str,
        name: &str,
        manifests: Vec<Value>,
        finalizer: bool,
    ) -> Value {
        let mut inner = self.inner.lock();
        let ns = format!("karmada-es-{cluster}");
        let key: Key = ("works", ns.clone(), name.to_string());
        let rv = Self::next_rv(&mut inner);
        let existing = inner.objects.get(&key).cloned();
        let mut work = existing.clone().unwrap_or_else(|| {
            json!({
                "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                "metadata": {"name": name, "namespace": ns, "uid": uuid::Uuid::new_v4().to_string(),
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
            })
        });
        work["metadata"]["resourceVersion"] = json!(rv.to_string());
        if finalizer {
            work["metadata"]["finalizers"] = json!(["karmada.io/execution-controller"]);
        }
        work["spec"] = json!({"workload": {"manifests": manifests}});
        inner.objects.insert(key, work.clone());
        Self::emit(
            &mut inner,
            if existing.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
            &work,
        );
        work
    }

    /// Deletes a Work: with finalizers it only gets a deletionTimestamp.
    pub fn delete_work(&self, cluster: &str, name: &str) {
        let mut inner = self.inner.lock();
        let key: Key = ("works", format!("karmada-es-{cluster}"), name.to_string());
        let Some(mut work) = inner.objects.get(&key).cloned() else {
            return;
        };
        let rv = Self::next_rv(&mut inner);
        work["metadata"]["resourceVersion"] = json!(rv.to_string());
        let has_finalizers = work["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            work["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            inner.objects.insert(key, work.clone());
            Self::emit(&mut inner, "MODIFIED", &work);
        } else {
            inner.objects.remove(&key);
            Self::emit(&mut inner, "DELETED", &work);
        }
    }

    /// Deletes a Work without any event reaching watchers (as if the log were lost).
    pub fn delete_work_silently(&self, cluster: &str, name: &str) {
        let mut inner = self.inner.lock();
        inner
            .objects
            .remove(&("works", format!("karmada-es-{cluster}"), name.to_string()));
        Self::next_rv(&mut inner);
    }

    /// Drops the event log and ends every watch: resuming answers 410.
    pub fn compact_and_kick(&self) {
        let mut inner = self.inner.lock();
        let rv = Self::next_rv(&mut inner);
        inner.log.clear();
        inner.min_rv = rv;
        inner.watchers.clear();
    }

    /// Ends every watch (the log stays: a resume works).
    pub fn kick_watchers(&self) {
        self.inner.lock().watchers.clear();
    }

    pub fn revoke_credentials(&self) {
        self.inner.lock().credentials.clear();
    }

    pub fn object(&self, kind: &'static str, ns: &str, name: &str) -> Option<Value> {
        self.inner
            .lock()
            .objects
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn work(&self, cluster: &str, name: &str) -> Option<Value> {
        self.object("works", &format!("karmada-es-{cluster}"), name)
    }

    pub fn cluster(&self, name: &str) -> Option<Value> {
        self.object("clusters", "", name)
    }

    pub fn lease(&self, name: &str) -> Option<Value> {
        self.object("leases", "karmada-cluster", name)
    }

    fn authorize(&self, headers: &HeaderMap, cluster: &str) -> Result<(), Response> {
        let token = bearer(headers);
        let inner = self.inner.lock();
        match inner.credentials.get(&token) {
            None => Err(status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "invalid bearer token",
            )),
            Some(c) if c != cluster => Err(status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "not your cluster",
            )),
            Some(_) => Ok(()),
        }
    }

    fn update(&self, key: Key, mut body: Value, status_only: bool, emit: bool) -> Response {
        let mut inner = self.inner.lock();
        let Some(current) = inner.objects.get(&key).cloned() else {
            return status(StatusCode::NOT_FOUND, "NotFound", "not found");
        };
        let want = body["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !want.is_empty() && Some(want) != current["metadata"]["resourceVersion"].as_str() {
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                "the object has been modified",
            );
        }
        let mut next = current.clone();
        if status_only {
            next["status"] = body["status"].take();
        } else {
            let keep_status = current.get("status").cloned();
            next = body;
            for k in ["uid", "creationTimestamp", "deletionTimestamp"] {
                if let Some(v) = current["metadata"].get(k) {
                    next["metadata"][k] = v.clone();
                }
            }
            if let Some(s) = keep_status {
                next["status"] = s;
            }
        }
        let rv = Self::next_rv(&mut inner);
        next["metadata"]["resourceVersion"] = json!(rv.to_string());
        let gone = next["metadata"].get("deletionTimestamp").is_some()
            && next["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        if gone {
            inner.objects.remove(&key);
            if emit {
                Self::emit(&mut inner, "DELETED", &next);
            }
        } else {
            inner.objects.insert(key, next.clone());
            if emit {
                Self::emit(&mut inner, "MODIFIED", &next);
            }
        }
        Json(next).into_response()
    }
}

fn parse(body: &Bytes) -> Result<Value, Response> {
    serde_json::from_slice(body)
        .map_err(|e| status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()))
}

fn cluster_of_ns(ns: &str) -> &str {
    ns.strip_prefix("karmada-es-").unwrap_or("")
}

async fn register(State(s): State<FakeServer>, headers: HeaderMap, body: Bytes) -> Response {
    if bearer(&headers) != JOIN_TOKEN {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "bad join token");
    }
    let body = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let name = body["clusterName"].as_str().unwrap_or("").to_string();
    let mut inner = s.inner.lock();
    inner.registrations += 1;
    inner.registered_bodies.push(body.clone());
    let token = format!("cred-{name}-{}", inner.registrations);
    inner.credentials.insert(token.clone(), name.clone());
    let key: Key = ("clusters", String::new(), name.clone());
    if !inner.objects.contains_key(&key) {
        let rv = FakeServer::next_rv(&mut inner);
        let cluster = json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(), "resourceVersion": rv.to_string(),
                         "labels": body.get("labels").cloned().unwrap_or(json!({}))},
            "spec": {"syncMode": "Pull", "provider": body.get("provider"), "region": body.get("region"),
                     "zones": body.get("zones")}});
        inner.objects.insert(key, cluster);
    }
    Json(json!({"clusterName": name, "token": token})).into_response()
}

async fn get_cluster(
    State(s): State<FakeServer>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    s.inner.lock().cluster_reads += 1;
    match s.cluster(&name) {
        Some(c) => Json(c).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", "no cluster"),
    }
}

async fn put_cluster(
    State(s): State<FakeServer>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    match parse(&body) {
        Ok(b) => s.update(("clusters", String::new(), name), b, false, false),
        Err(r) => r,
    }
}

async fn put_cluster_status(
    State(s): State<FakeServer>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    let b = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let resp = s.update(("clusters", String::new(), name), b, true, false);
    if resp.status().is_success() {
        s.inner.lock().cluster_status_writes += 1;
    }
    resp
}

async fn create_lease(
    State(s): State<FakeServer>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut b = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let name = b["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    let mut inner = s.inner.lock();
    let key: Key = ("leases", ns, name);
    if inner.objects.contains_key(&key) {
        return status(StatusCode::CONFLICT, "AlreadyExists", "exists");
    }
    let rv = FakeServer::next_rv(&mut inner);
    b["metadata"]["resourceVersion"] = json!(rv.to_string());
    b["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    inner.objects.insert(key, b.clone());
    inner.lease_writes += 1;
    inner.lease_write_times.push(tokio::time::Instant::now());
    (StatusCode::CREATED, Json(b)).into_response()
}

async fn get_lease(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    match s.object("leases", &ns, &name) {
        Some(l) => Json(l).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", "no lease"),
    }
}

async fn put_lease(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, &name) {
        return r;
    }
    let b = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let resp = s.update(("leases", ns, name), b, false, false);
    if resp.status().is_success() {
        let mut inner = s.inner.lock();
        inner.lease_writes += 1;
        inner.lease_write_times.push(tokio::time::Instant::now());
    }
    resp
}

async fn list_works(
    State(s): State<FakeServer>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    let mut inner = s.inner.lock();
    if q.get("watch").map(String::as_str) != Some("true") {
        inner.lists += 1;
        let items: Vec<Value> = inner
            .objects
            .iter()
            .filter(|((k, n, _), _)| *k == "works" && *n == ns)
            .map(|(_, v)| v.clone())
            .collect();
        let mut metadata = json!({"resourceVersion": inner.rv.to_string()});
        // A list with a limit is answered in pages of at most FAKE_PAGE items (a server may
        // return fewer than the limit), the continue token being the next item's index.
        let items = if q.contains_key("limit") {
            inner.paged_lists += 1;
            let from: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
            let to = (from + FAKE_PAGE).min(items.len());
            if to < items.len() {
                metadata["continue"] = json!(to.to_string());
            }
            items[from.min(to)..to].to_vec()
        } else {
            items
        };
        return Json(
            json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "WorkList",
            "metadata": metadata, "items": items}),
        )
        .into_response();
    }
    inner.watches += 1;
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if from < inner.min_rv {
        return status(StatusCode::GONE, "Expired", "too old resource version");
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    for (rv, type_, obj) in &inner.log {
        if *rv > from && obj["metadata"]["namespace"] == ns.as_str() {
            let _ = tx.send(format!("{}\n", json!({"type": type_, "object": obj})));
        }
    }
    inner.watchers.push((ns, tx));
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok::<_, Infallible>)));
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn get_work(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    match s.object("works", &ns, &name) {
        Some(w) => Json(w).into_response(),
        None => status(StatusCode::NOT_FOUND, "NotFound", "no work"),
    }
}

async fn put_work(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    match parse(&body) {
        Ok(b) => s.update(("works", ns, name), b, false, true),
        Err(r) => r,
    }
}

async fn patch_work(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok())
        != Some("application/merge-patch+json")
    {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "merge patch only",
        );
    }
    let patch = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(mut current) = s.object("works", &ns, &name) else {
        return status(StatusCode::NOT_FOUND, "NotFound", "no work");
    };
    json_patch::merge(&mut current, &patch);
    s.update(("works", ns, name), current, false, true)
}

async fn put_work_status(
    State(s): State<FakeServer>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let hold = s.inner.lock().status_hold.clone();
    if let Some(hold) = hold {
        s.inner.lock().status_writes_held += 1;
        let _permit = hold.acquire().await;
    }
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    let b = match parse(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let resp = s.update(("works", ns, name), b, true, true);
    if resp.status().is_success() {
        s.inner.lock().work_status_writes += 1;
    }
    resp
}

async fn create_event(
    State(s): State<FakeServer>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.authorize(&headers, cluster_of_ns(&ns)) {
        return r;
    }
    match parse(&body) {
        Ok(b) => {
            s.inner.lock().events.push(b.clone());
            (StatusCode::CREATED, Json(b)).into_response()
        }
        Err(r) => r,
    }
}

/// What one [`Listener`] served, and how it misbehaves.
#[derive(Default)]
pub struct ListenerState {
    /// Requests answered with a success status.
    pub served: AtomicUsize,
    /// Lease creations and updates answered with success.
    pub lease_writes: AtomicUsize,
    /// Work lists (not watches) answered with success.
    pub lists: AtomicUsize,
    /// Work watches opened.
    pub watches: AtomicUsize,
    /// Requests answered with the injected status ([`Listener::answer`]).
    pub refused: AtomicUsize,
    /// Requests left unanswered ([`Listener::freeze`]).
    pub held: AtomicUsize,
    answer: AtomicU16,
    frozen: AtomicBool,
}

/// One address of a [`FakeServer`]: a server of the fleet, as the agent sees it.
pub struct Listener {
    pub addr: SocketAddr,
    pub state: Arc<ListenerState>,
    handle: axum_server::Handle<SocketAddr>,
}

impl Listener {
    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers `code` (with a Kubernetes Status) to every later request; 0 serves again.
    pub fn answer(&self, code: u16) {
        self.state.answer.store(code, Ordering::SeqCst);
    }

    /// Leaves every later request unanswered (a hung server), or serves again.
    pub fn freeze(&self, on: bool) {
        self.state.frozen.store(on, Ordering::SeqCst);
    }

    /// Closes the listener and every open connection at once, as a killed process does.
    pub fn stop(&self) {
        self.handle.shutdown();
    }

    pub fn served(&self) -> usize {
        self.state.served.load(Ordering::SeqCst)
    }

    pub fn lease_writes(&self) -> usize {
        self.state.lease_writes.load(Ordering::SeqCst)
    }

    pub fn lists(&self) -> usize {
        self.state.lists.load(Ordering::SeqCst)
    }

    pub fn watches(&self) -> usize {
        self.state.watches.load(Ordering::SeqCst)
    }

    pub fn refused(&self) -> usize {
        self.state.refused.load(Ordering::SeqCst)
    }

    pub fn held(&self) -> usize {
        self.state.held.load(Ordering::SeqCst)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Counts what a [`Listener`] serves, and misbehaves as it is told.
async fn through_listener(
    State(state): State<Arc<ListenerState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if state.frozen.load(Ordering::SeqCst) {
        state.held.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<()>().await;
    }
    let code = state.answer.load(Ordering::SeqCst);
    if code != 0 {
        state.refused.fetch_add(1, Ordering::SeqCst);
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return status(code, "Injected", "injected by the test");
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
    let lease_write = path.contains("/leases")
        && (method == axum::http::Method::PUT || method == axum::http::Method::POST);
    let works = method == axum::http::Method::GET && path.ends_with("/works");
    let response = next.run(req).await;
    if response.status().is_success() {
        state.served.fetch_add(1, Ordering::SeqCst);
        if lease_write {
            state.lease_writes.fetch_add(1, Ordering::SeqCst);
        }
        if works && watch {
            state.watches.fetch_add(1, Ordering::SeqCst);
        } else if works {
            state.lists.fetch_add(1, Ordering::SeqCst);
        }
    }
    response
}

/// A TLS acceptor that counts the handshakes that fail (a client that rejects the server's
/// certificate aborts its handshake).
#[derive(Clone)]
struct CountingTls {
    tls: axum_server::tls_rustls::RustlsAcceptor,
    server: FakeServer,
}

impl<I, S> axum_server::accept::Accept<I, S> for CountingTls
where
    axum_server::tls_rustls::RustlsAcceptor: axum_server::accept::Accept<I, S>,
    <axum_server::tls_rustls::RustlsAcceptor as axum_server::accept::Accept<I, S>>::Future:
        Send + 'static,
{
    type Stream =
        <axum_server::tls_rustls::RustlsAcceptor as axum_server::accept::Accept<I, S>>::Stream;
    type Service =
        <axum_server::tls_rustls::RustlsAcceptor as axum_server::accept::Accept<I, S>>::Service;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = std::io::Result<(Self::Stream, Self::Service)>> + Send,
        >,
    >;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let handshake = self.tls.accept(stream, service);
        let server = self.server.clone();
        Box::pin(async move {
            let result = handshake.await;
            if result.is_err() {
                server.inner.lock().tls_handshake_failures += 1;
            }
            result
        })
    }
}

/// What one look of [`eventually`] answers: done, with a value, or not yet, with what it saw.
/// The twin of `flotilla_server::testing::Outcome`.
pub trait Outcome {
    /// What the wait gives back once it is over.
    type Value;
    /// `Ok(value)` ends the wait; `Err(seen)` tells what this look saw instead.
    fn into_outcome(self) -> Result<Self::Value, String>;
}

/// `Some(value)` ends the wait; `None` is "not yet" and tells nothing more.
impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_string())
    }
}

/// `Ok(value)` ends the wait; `Err(seen)` is "not yet", and the last `seen` is in the panic.
impl<T, E: std::fmt::Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// The agent tests' one wait: looks at `f` every 20 ms (tokio time) until it answers
/// `Some(value)` or `Ok(value)`, and returns the value. The twin of
/// `flotilla_server::testing::eventually`, same signature.
///
/// # Panics
/// When `deadline` has passed and `f` still says "not yet": the message names `what` and what
/// the last look saw.
pub async fn eventually<O, F, Fut>(what: &str, deadline: Duration, mut f: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = O>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let seen = match f().await.into_outcome() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= until {
            panic!("waited {deadline:?} for {what}; last seen: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
