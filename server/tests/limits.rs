//! Nobody can starve the server, and every error answer is a `Status`: deep nesting, made-up
//! paths in metrics, CRDs that redefine built-in kinds, the event log's byte budget (through
//! the router and the store), and slow or oversized or malformed requests on a real socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{assert_status, TestApi};
use flotilla_api::kinds::builtin_by_plural;
use flotilla_server::app::{self, ServerConfig, ServerHandle, StoreBackend, Tls};
use flotilla_server::store::{DeleteOptions, KvStore, Store, StoreConfig};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn status_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

#[tokio::test]
async fn deeply_nested_bodies_answer_400_before_decoding() {
    let api = TestApi::new().await;
    let n = 100_000;
    let json_body = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{}1{}}}",
        "[".repeat(n),
        "]".repeat(n)
    );
    let yaml_body = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\ndata: {}1{}\n",
        "{a: ".repeat(n),
        "}".repeat(n)
    );
    for (ct, body) in [
        ("application/json", json_body),
        ("application/yaml", yaml_body),
    ] {
        let (code, text) = api
            .send("POST", CONFIGMAPS, Some(ct), Body::from(body), &[])
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{ct}: {text}");
        let status = status_of(&text);
        assert_status(&status, 400, "BadRequest");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("nested deeper than 128 levels"),
            "{ct}: {status}"
        );
    }
    // Nothing was stored.
    let (code, list) = api.call("GET", CONFIGMAPS, None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn made_up_paths_share_one_metrics_label() {
    let api = TestApi::new().await;
    for i in 0..200 {
        let paths = [
            format!("/apis/apps/v1/namespaces/default/madeup{i}"),
            format!("/api/v1/nothing{i}"),
            format!("/apis/apps/v1/namespaces/default/deployments/x/sub{i}"),
        ];
        for path in paths {
            api.send("GET", &path, None, Body::empty(), &[]).await;
            api.send_as("wrong-token", "GET", &path, None, Body::empty(), &[])
                .await;
        }
    }
    let (code, text) = api.send("GET", "/metrics", None, Body::empty(), &[]).await;
    assert_eq!(code, StatusCode::OK);
    for made_up in ["madeup7", "nothing7", "sub7"] {
        assert!(!text.contains(made_up), "{made_up} is a label");
    }
    let unmatched: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("flotilla_apiserver_requests_total{"))
        .filter(|l| l.contains("resource=\"unmatched\""))
        .collect();
    // One series per verb and code, however many paths were made up.
    assert!(
        !unmatched.is_empty() && unmatched.len() <= 6,
        "{unmatched:#?}"
    );
    let total: f64 = unmatched
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(total, 1200.0);
}

#[tokio::test]
async fn crds_that_redefine_builtin_kinds_are_invalid() {
    let api = TestApi::new().await;
    let crd = |group: &str, plural: &str, kind: &str, scope: &str| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {
                "group": group,
                "names": {"plural": plural, "kind": kind},
                "scope": scope,
                "versions": [{"name": "v1", "served": true, "storage": true}],
            },
        })
    };
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let table = [
        (
            crd("apps", "deployments", "Deployment", "Namespaced"),
            "spec.names.plural",
        ),
        (
            crd("cluster.karmada.io", "clusters", "Cluster", "Cluster"),
            "spec.names.plural",
        ),
        (
            crd("apps", "mydeployments", "Deployment", "Namespaced"),
            "spec.names.kind",
        ),
    ];
    for (body, field) in table {
        let (code, status) = api.call("POST", path, Some(body.clone())).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{status}");
        assert_status(&status, 422, "Invalid");
        assert_eq!(status["details"]["causes"][0]["field"], field, "{status}");
    }
    // Built-in kinds are still served as before.
    let (code, _) = api
        .call("GET", "/apis/apps/v1/namespaces/default/deployments", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = api
        .call(
            "POST",
            path,
            Some(crd("example.io", "deployments", "Deployment", "Namespaced")),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
}

#[tokio::test]
async fn answers_made_outside_the_handlers_are_status_bodies() {
    let api = TestApi::new().await;
    let table = [
        ("POST", "/healthz", 405, "MethodNotAllowed"),
        ("DELETE", "/version", 405, "MethodNotAllowed"),
        (
            "GET",
            "/apis/apps/v1/namespaces/%FF%FE/deployments",
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?limit=%FF",
            400,
            "BadRequest",
        ),
    ];
    for (method, path, code, reason) in table {
        let (got, text) = api.send(method, path, None, Body::empty(), &[]).await;
        assert_eq!(got.as_u16(), code, "{method} {path}: {text}");
        assert_status(&status_of(&text), code, reason);
    }
}

#[tokio::test]
async fn deleted_large_objects_leave_the_event_log_within_its_byte_budget() {
    let budget = 8 << 20;
    let store = KvStore::memory(StoreConfig {
        event_log_max_bytes: budget,
        ..StoreConfig::default()
    });
    let rt = builtin_by_plural("", "configmaps").unwrap();
    let big = "x".repeat(3 << 20);
    for i in 0..5 {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big{i}"), "namespace": "default"},
            "data": {"big": big},
        });
        store.create(&rt, cm).await.unwrap();
    }
    for i in 0..5 {
        store
            .delete(
                &rt,
                Some("default"),
                &format!("big{i}"),
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
    }
    let stats = store.stats();
    // Ten events of 3 MiB were written; the two newest fit.
    assert!(
        stats.retained_event_bytes <= budget as u64,
        "{} bytes retained",
        stats.retained_event_bytes
    );
    assert_eq!(stats.retained_events, 2);
}

// --- on a real socket --------------------------------------------------------------------

async fn serve(tweak: impl FnOnce(&mut ServerConfig)) -> (ServerHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Tls::Plain;
    config.store_backend = StoreBackend::Memory;
    config.controllers = None;
    tweak(&mut config);
    (app::start(config).await.unwrap(), dir)
}

/// Reads until the server closes the connection (10 s at most).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the server did not close the connection within 10 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits an HTTP/1 answer into its status code and its body.
fn answer(text: &str) -> (u16, &str) {
    let code = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body)
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_sent() {
    let (server, _dir) = serve(|c| c.limits.max_body_bytes = 1024).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST {CONFIGMAPS} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        server.admin_token,
        100 << 20
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // No byte of the body is sent: the answer comes anyway.
    let text = read_to_close(&mut s).await;
    let (code, body) = answer(&text);
    assert_eq!(code, 413, "{text}");
    assert_status(&status_of(body), 413, "RequestEntityTooLarge");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_body_that_stalls_answers_408_after_the_body_read_timeout() {
    let (server, _dir) = serve(|c| c.limits.body_read_timeout = Duration::from_millis(300)).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST {CONFIGMAPS} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"apiVersion\":",
        server.admin_token
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let text = read_to_close(&mut s).await;
    let (code, body) = answer(&text);
    assert_eq!(code, 408, "{text}");
    assert_status(&status_of(body), 408, "Timeout");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn headers_that_stall_close_the_connection_after_the_header_read_timeout() {
    let (server, _dir) = serve(|c| c.limits.header_read_timeout = Duration::from_millis(300)).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let text = read_to_close(&mut s).await;
    assert!(!text.contains("200 OK"), "{text}");
    // A client that sends its head in time is served.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&read_to_close(&mut s).await).0, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_at_accept() {
    let (server, _dir) = serve(|c| c.limits.max_connections = 2).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        // A served connection answers.
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut buf))
            .await
            .expect("no answer within 10 s")
            .unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        held.push(s);
    }
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let _ = third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), third.read_to_end(&mut out))
        .await
        .expect("the third connection was not closed within 10 s");
    assert!(
        read.is_err() || out.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    drop(held);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn malformed_http_answers_status_bodies() {
    let (server, _dir) = serve(|_| {}).await;
    let long_uri = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "b".repeat(1 << 20)
    );
    let table: [(&[u8], u16); 4] = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nbad header\r\n\r\n", 400),
        (long_uri.as_bytes(), 414),
        (big_header.as_bytes(), 431),
    ];
    for (request, want) in table {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        // The server may answer and close before it has read everything.
        let _ = s.write_all(request).await;
        let text = read_to_close(&mut s).await;
        let (code, body) = answer(&text);
        assert_eq!(code, want, "{text}");
        let status = status_of(body);
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["code"], want, "{status}");
    }
    // The token still matters: a malformed request is no way in.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(
        format!("GET {CONFIGMAPS} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(answer(&read_to_close(&mut s).await).0, 401);
    server.shutdown().await.unwrap();
}

/// A refused request's body is read (up to 256 KiB) before the refusal is sent, as Go's
/// net/http does. Over HTTP/2 (what curl and kubectl speak to the TLS server), answering
/// while the client is still sending ends the request stream with a reset, and curl reports
/// "Stream error in the HTTP/2 framing layer" (code 000) instead of the 401. Driven by the real
/// curl (HTTP/2 with prior knowledge over plain TCP), for the auth middleware and registration.
#[tokio::test]
async fn a_refusal_over_http2_reaches_the_client_whole() {
    let (server, _dir) = serve(|_| {}).await;
    let body = format!(
        "{{\"clusterName\": \"m\", \"pad\": \"{}\"}}",
        "x".repeat(64 << 10)
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &body).unwrap();
    for path in [CONFIGMAPS, "/flotilla/v1/register"] {
        for attempt in 0..10 {
            let url = format!("http://{}{path}", server.addr);
            let data = format!("@{}", file.path().display());
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("curl")
                    .args([
                        "-sS",
                        "--http2-prior-knowledge",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                    ])
                    .args(["-X", "POST", "-H", "Authorization: Bearer wrong"])
                    .args([
                        "-H",
                        "Content-Type: application/json",
                        "--data-binary",
                        &data,
                        &url,
                    ])
                    .output()
                    .expect("curl runs (scripts/setup.sh installs it)")
            })
            .await
            .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "401",
                "{path}, attempt {attempt}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    server.shutdown().await.unwrap();
}
