//! CustomResourceDefinitions and discovery through the router: a CRD's kinds are served from
//! the answer to its write until its real deletion — also when the deletion waits for a
//! finalizer that a later write removes — and never again after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::StatusCode;
use common::TestApi;
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn crd(group: &str, plural: &str, kind: &str, finalizers: &[&str]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "finalizers": finalizers},
        "spec": {
            "group": group,
            "names": {"plural": plural, "kind": kind},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true}]
        }
    })
}

/// Whether discovery lists `group` in `/apis` and serves its `v1` resource list.
async fn discovered(api: &TestApi, group: &str) -> bool {
    let (s, groups) = api.call("GET", "/apis", None).await;
    assert_eq!(s, StatusCode::OK, "{groups}");
    let listed = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == group);
    let (s, resources) = api.call("GET", &format!("/apis/{group}/v1"), None).await;
    let served = s == StatusCode::OK;
    assert_eq!(
        listed, served,
        "/apis and /apis/{group}/v1 disagree: {resources}"
    );
    served
}

#[tokio::test]
async fn a_crd_deleted_through_a_finalizer_leaves_discovery_and_stays_gone() {
    let api = TestApi::new().await;
    let (s, body) = api
        .call(
            "POST",
            CRDS,
            Some(crd(
                "example.io",
                "doohickeys",
                "Doohickey",
                &["example.io/cleanup"],
            )),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    assert!(discovered(&api, "example.io").await, "served once created");

    // The delete waits for the finalizer: the CRD is terminating and still served.
    let path = format!("{CRDS}/doohickeys.example.io");
    let (s, body) = api.call("DELETE", &path, None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    assert!(
        discovered(&api, "example.io").await,
        "served while terminating"
    );

    // Removing the finalizer deletes it for real: it leaves discovery at once.
    let (s, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (s, body) = api.call("GET", &path, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert!(
        !discovered(&api, "example.io").await,
        "gone at the real deletion"
    );

    // A later CRD write is applied (its kind is served) and the deleted one stays gone.
    let (s, body) = api
        .call("POST", CRDS, Some(crd("other.io", "gizmos", "Gizmo", &[])))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    assert!(discovered(&api, "other.io").await);
    assert!(!discovered(&api, "example.io").await, "stays gone");
}

#[tokio::test]
async fn collection_deletes_and_updates_of_crds_reach_discovery_before_the_answer() {
    let api = TestApi::new().await;
    for (group, plural, kind) in [("a.io", "apples", "Apple"), ("b.io", "berries", "Berry")] {
        let (s, body) = api
            .call("POST", CRDS, Some(crd(group, plural, kind, &[])))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{body}");
    }
    // An update that stops serving v1 takes the kind out of discovery.
    let path = format!("{CRDS}/apples.a.io");
    let (_, mut apple) = api.call("GET", &path, None).await;
    apple["spec"]["versions"][0]["served"] = json!(false);
    let (s, body) = api.call("PUT", &path, Some(apple)).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(!discovered(&api, "a.io").await);
    assert!(discovered(&api, "b.io").await);

    let (s, body) = api.call("DELETE", CRDS, None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(!discovered(&api, "b.io").await);
}
