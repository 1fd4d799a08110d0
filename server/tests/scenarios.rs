//! Every document of examples/ decodes, validates, is stored through the API and
//! reads back with every field the user wrote unchanged, defaults applied, and the purge-mode
//! spelling kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::StatusCode;
use common::TestApi;
use serde_json::Value;
use std::path::Path;

/// Whether every field of `want` is in `got` with the same value (lists compared item by item).
fn contains(got: &Value, want: &Value, path: &str) -> Result<(), String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, v) in w {
                let child = format!("{path}.{k}");
                let g = g.get(k).ok_or_else(|| format!("{child} is missing"))?;
                contains(g, v, &child)?;
            }
            Ok(())
        }
        (Value::Array(g), Value::Array(w)) => {
            if g.len() < w.len() {
                return Err(format!("{path} lost items"));
            }
            for (i, v) in w.iter().enumerate() {
                contains(&g[i], v, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (g, w) if g == w => Ok(()),
        (g, w) => Err(format!("{path}: stored {g}, wrote {w}")),
    }
}

fn collection(doc: &Value) -> String {
    let api_version = doc["apiVersion"].as_str().unwrap();
    let kind = doc["kind"].as_str().unwrap();
    let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
    let plural = format!("{}s", kind.to_ascii_lowercase()).replace("policys", "policies");
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    format!("{prefix}/namespaces/{ns}/{plural}")
}

#[tokio::test]
async fn scenario_documents_round_trip_through_the_store() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut policies = 0;
    for file in files {
        let api = TestApi::new().await;
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            let path = collection(&doc);
            let (s, created) = api.call("POST", &path, Some(doc.clone())).await;
            assert_eq!(s, StatusCode::CREATED, "{}: {created}", file.display());
            let name = doc["metadata"]["name"].as_str().unwrap();
            let (s, read) = api.call("GET", &format!("{path}/{name}"), None).await;
            assert_eq!(s, StatusCode::OK);
            assert_eq!(read, created, "read back equals what the create answered");
            if let Err(e) = contains(&read, &doc, "") {
                panic!("{}: {e}", file.display());
            }
            if doc["kind"] == "PropagationPolicy" {
                policies += 1;
                let tolerations = read["spec"]["placement"]["clusterTolerations"]
                    .as_array()
                    .unwrap();
                assert!(
                    tolerations
                        .iter()
                        .any(|t| t["key"] == "cluster.karmada.io/unreachable"
                            && t["effect"] == "NoExecute"),
                    "{}: default tolerations applied",
                    file.display()
                );
                if doc["spec"]["failover"]["application"].is_object() {
                    assert_eq!(read["spec"]["propagateDeps"], true, "{}", file.display());
                }
                // Writing it back unchanged is a no-op: defaults are stable.
                let (s, again) = api
                    .call("PUT", &format!("{path}/{name}"), Some(read.clone()))
                    .await;
                assert_eq!(s, StatusCode::OK);
                assert_eq!(
                    again["metadata"]["resourceVersion"],
                    read["metadata"]["resourceVersion"]
                );
            }
        }
    }
    assert_eq!(policies, 5);
}
