//! Watches over real HTTP: events arrive in order; a client that disconnects and resumes from
//! its last resourceVersion misses nothing; one that resumes from a compacted version gets 410
//! and relists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_server::app::{self, Engine, ServerConfig, ServerHandle, Tls};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn server(event_log_capacity: usize) -> (ServerHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.engine = Engine::Memory;
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
async fn a_compacted_resource_version_is_410_and_the_client_relists() {
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
    assert_eq!(resp.status(), 410);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["reason"], "Expired");
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
    config.engine = Engine::Memory;
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
