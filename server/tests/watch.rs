//! Watches over real HTTP: events arrive in order; a client that disconnects and resumes from
//! its last resourceVersion misses nothing; one that resumes from a compacted version gets the
//! 410 as an ERROR event in a 200 stream (as kube-apiserver answers) and relists; bookmarks
//! carry the store's position; a streaming list ends its initial events with the annotated
//! bookmark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_server::app::{self, ServerConfig, ServerHandle, StoreBackend, Tls};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn server(event_log_capacity: usize) -> (ServerHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store_backend = StoreBackend::Memory;
    config.tls = Tls::Plain;
    config.event_log_capacity = event_log_capacity;
    (app::start(config).await.unwrap(), dir)
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn put_cm(s: &ServerHandle, name: &str, value: &str) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}});
    let url = format!("{}{CMS}", s.url());
    let resp = client()
        .post(&url)
        .bearer_auth(&s.admin_token)
        .json(&body)
        .send()
        .await
        .unwrap();
    if resp.status() == 409 {
        let current: Value = client()
            .get(format!("{url}/{name}"))
            .bearer_auth(&s.admin_token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut next = body.clone();
        next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let r = client()
            .put(format!("{url}/{name}"))
            .bearer_auth(&s.admin_token)
            .json(&next)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    } else {
        assert_eq!(resp.status(), 201);
    }
}

/// Reads `n` events from a watch response.
async fn read_events(resp: reqwest::Response, n: usize) -> Vec<Value> {
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("waited 10s for {n} watch events, got {}", out.len()))
            .expect("stream ended")
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

fn summary(events: &[Value]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["object"]["data"]["v"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn watch_resumes_from_last_resource_version_without_missing_events() {
    let (s, _dir) = server(1000).await;
    put_cm(&s, "a", "1").await;
    let resp = client()
        .get(format!("{}{CMS}?watch=true", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    put_cm(&s, "a", "2").await;
    let first = read_events(resp, 2).await;
    assert_eq!(
        summary(&first),
        [
            ("ADDED".into(), "a".into(), "1".into()),
            ("MODIFIED".into(), "a".into(), "2".into())
        ]
    );
    // The client goes away; changes happen meanwhile.
    let last_rv = first[1]["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    put_cm(&s, "b", "1").await;
    put_cm(&s, "a", "3").await;
    let resp = client()
        .delete(format!("{}{CMS}/b", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resumed = client()
        .get(format!(
            "{}{CMS}?watch=true&resourceVersion={last_rv}",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    let events = read_events(resumed, 3).await;
    assert_eq!(
        summary(&events),
        [
            ("ADDED".into(), "b".into(), "1".into()),
            ("MODIFIED".into(), "a".into(), "3".into()),
            ("DELETED".into(), "b".into(), "1".into()),
        ]
    );
    s.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_compacted_resource_version_is_an_in_stream_410_and_the_client_relists() {
    let (s, _dir) = server(5).await;
    put_cm(&s, "a", "0").await;
    let list: Value = client()
        .get(format!("{}{CMS}", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let old_rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 1..=20 {
        put_cm(&s, "a", &i.to_string()).await;
    }
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&resourceVersion={old_rv}",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    // Kubernetes: 200, then one ERROR event with the 410 Status, then the end.
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(10), resp.text())
        .await
        .expect("the expired watch ends by itself")
        .unwrap();
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert_eq!(lines[0]["type"], "ERROR");
    let status = &lines[0]["object"];
    assert_eq!(
        (
            status["kind"].as_str(),
            status["code"].as_i64(),
            status["reason"].as_str()
        ),
        (Some("Status"), Some(410), Some("Expired"))
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too old resource version: {old_rv} (")),
        "{status}"
    );
    // Relist, then watch from the list's version.
    let list: Value = client()
        .get(format!("{}{CMS}", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"][0]["data"]["v"], "20");
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = client()
        .get(format!("{}{CMS}?watch=true&resourceVersion={rv}", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    put_cm(&s, "a", "21").await;
    let events = read_events(resp, 1).await;
    assert_eq!(
        summary(&events),
        [("MODIFIED".into(), "a".into(), "21".into())]
    );
    s.shutdown().await.unwrap();
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store_backend = StoreBackend::Memory;
    config.tls = Tls::Plain;
    config.limits.bookmark_interval = Duration::from_millis(50);
    let s = app::start(config).await.unwrap();
    put_cm(&s, "a", "1").await;
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    let events = read_events(resp, 2).await;
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert!(events[1]["object"]["metadata"]["resourceVersion"]
        .as_str()
        .is_some());
    // timeoutSeconds ends the stream.
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&resourceVersion=0&timeoutSeconds=1",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body.lines().count(), 1, "{body}");
    s.shutdown().await.unwrap();
}

/// Reads events until `done` says the last one read is the one waited for.
async fn read_until(resp: reqwest::Response, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("waited 10s; got {out:?}"))
            .expect("stream ended")
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            let last = done(&event);
            out.push(event);
            if last {
                return out;
            }
        }
    }
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn bookmarks_of_a_quiet_watch_carry_the_stores_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.store_backend = StoreBackend::Memory;
    config.tls = Tls::Plain;
    config.event_log_capacity = 5;
    config.limits.bookmark_interval = Duration::from_millis(100);
    let s = app::start(config).await.unwrap();
    let quiet = "/api/v1/namespaces/default/secrets";
    let list: Value = client()
        .get(format!("{}{quiet}", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = rv_of(&list);
    let resp = client()
        .get(format!(
            "{}{quiet}?watch=true&allowWatchBookmarks=true&resourceVersion={listed}",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    // Writes to another kind, more than the event log keeps.
    for i in 0..20 {
        put_cm(&s, &format!("c{i}"), "x").await;
    }
    let cm: Value = client()
        .get(format!("{}{CMS}/c19", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last_write = rv_of(&cm);
    let events = read_until(resp, |e| {
        e["type"] == "BOOKMARK" && rv_of(&e["object"]) >= last_write
    })
    .await;
    assert!(events.iter().all(|e| e["type"] == "BOOKMARK"), "{events:?}");
    let bookmark = events.last().unwrap();
    assert_eq!(bookmark["object"]["kind"], "Secret");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    // The client resumes from the bookmark: still inside the log, nothing missed.
    let at = rv_of(&bookmark["object"]);
    let resumed = client()
        .get(format!(
            "{}{quiet}?watch=true&resourceVersion={at}",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    let r = client()
        .post(format!("{}{quiet}", s.url()))
        .bearer_auth(&s.admin_token)
        .json(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let events = read_events(resumed, 1).await;
    assert_eq!(events[0]["type"], "ADDED", "{events:?}");
    assert_eq!(events[0]["object"]["metadata"]["name"], "s");
    s.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_the_annotated_bookmark() {
    let (s, _dir) = server(1000).await;
    put_cm(&s, "a", "1").await;
    put_cm(&s, "b", "1").await;
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp;
    let head = read_until_owned(&mut stream, 3).await;
    assert_eq!(
        head.iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ADDED", "ADDED", "BOOKMARK"]
    );
    let end = &head[2]["object"];
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let list: Value = client()
        .get(format!("{}{CMS}", s.url()))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rv_of(end), rv_of(&list));
    // Then the live changes.
    put_cm(&s, "a", "2").await;
    let next = read_until_owned(&mut stream, 1).await;
    assert_eq!(
        summary(&next),
        [("MODIFIED".into(), "a".into(), "2".into())]
    );

    // Without allowWatchBookmarks the state comes, and no bookmark (as in Kubernetes).
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body.lines().count(), 2, "{body}");
    assert!(!body.contains("BOOKMARK"), "{body}");
    // A streaming watch without resourceVersionMatch=NotOlderThan is a 422, as in Kubernetes.
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "ListOptions");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );
    // sendInitialEvents=false: no state, only what follows.
    let resp = client()
        .get(format!(
            "{}{CMS}?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan",
            s.url()
        ))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap();
    put_cm(&s, "b", "2").await;
    let events = read_events(resp, 1).await;
    assert_eq!(
        summary(&events),
        [("MODIFIED".into(), "b".into(), "2".into())]
    );
    s.shutdown().await.unwrap();
}

/// Reads `n` events from a watch response kept by the caller (for reading on later).
async fn read_until_owned(resp: &mut reqwest::Response, n: usize) -> Vec<Value> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("waited 10s for {n} watch events, got {out:?}"))
            .unwrap()
            .expect("stream ended");
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}
