//! Requests a careless or hostile client sends, each a regression test: paths
//! that decode to `/` or to nothing, dry runs that must not write, malformed delete options,
//! json-patches that used to panic the handler or blow the object up, and bodies whose
//! identity disagrees with the URL. Every answer is a `Status`, and what was stored stays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{assert_status, TestApi};
use flotilla_server::store::ListOptions;
use serde_json::{json, Value};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const PP: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const NAMESPACES: &str = "/api/v1/namespaces";

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

fn policy(name: &str) -> Value {
    json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}}})
}

fn cluster(name: &str) -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name}, "spec": {"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1"}})
}

fn crd(plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.io")},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}})
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// Everything the store holds, as (kind, namespace/name, resourceVersion) triples.
async fn snapshot(api: &TestApi) -> Vec<String> {
    let mut out = Vec::new();
    for (group, plural) in [
        ("", "configmaps"),
        ("", "namespaces"),
        ("policy.karmada.io", "propagationpolicies"),
        ("cluster.karmada.io", "clusters"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ] {
        let rt = flotilla_api::kinds::builtin_by_plural(group, plural)
            .unwrap_or_else(|| panic!("no built-in kind {group}/{plural}"));
        let page = api
            .store
            .list(&rt, None, &ListOptions::default())
            .await
            .unwrap();
        for item in page.items {
            out.push(format!(
                "{plural} {}/{} {}",
                item["metadata"]["namespace"].as_str().unwrap_or(""),
                item["metadata"]["name"].as_str().unwrap_or(""),
                item["metadata"]["resourceVersion"].as_str().unwrap_or(""),
            ));
        }
    }
    out.sort();
    out
}

async fn seeded() -> TestApi {
    let api = TestApi::new().await;
    for (path, obj) in [
        (CM, configmap("a")),
        (CM, configmap("b")),
        (PP, policy("p1")),
        (PP, policy("p2")),
        (CLUSTERS, cluster("m1")),
        (CLUSTERS, cluster("m2")),
        (CRDS, crd("widgets")),
        (NAMESPACES, namespace("team-a")),
    ] {
        let (code, body) = api.call("POST", path, Some(obj)).await;
        assert_eq!(code, StatusCode::CREATED, "{path}: {body}");
    }
    api
}

fn is_status_4xx(code: StatusCode, body: &Value) -> bool {
    code.is_client_error() && body["kind"] == "Status" && body["code"] == code.as_u16()
}

#[tokio::test]
async fn names_that_decode_to_a_slash_or_to_nothing_never_reach_a_collection() {
    let api = seeded().await;
    let before = snapshot(&api).await;
    let collections = [CM, PP, CLUSTERS, CRDS, NAMESPACES];
    let bad_names = [
        "%2F", "%2f", "", "/", "%2E", "%2E%2E", "a%2Fb", "%25", "%00",
    ];
    for collection in collections {
        for name in bad_names {
            for method in ["DELETE", "GET", "PUT", "PATCH"] {
                let path = format!("{collection}/{name}");
                let body = match method {
                    "PUT" => Some(configmap("x")),
                    "PATCH" => Some(json!({})),
                    _ => None,
                };
                let (code, answer) = if method == "PATCH" {
                    api.patch(&path, "application/merge-patch+json", json!({}))
                        .await
                } else {
                    api.call(method, &path, body).await
                };
                assert!(
                    is_status_4xx(code, &answer),
                    "{method} {path}: {code} {answer}"
                );
            }
        }
        // Empty segments anywhere are no path at all.
        for path in [format!("{collection}//"), format!("{collection}/a/")] {
            let (code, answer) = api.call("DELETE", &path, None).await;
            assert_eq!(code, StatusCode::NOT_FOUND, "{path}: {answer}");
            assert_status(&answer, 404, "NotFound");
        }
    }
    let (code, _) = api
        .call("DELETE", "/api/v1/namespaces/default//configmaps", None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(snapshot(&api).await, before, "nothing stored may change");
}

#[tokio::test]
async fn dry_run_never_writes_on_any_verb() {
    let api = seeded().await;
    let before = snapshot(&api).await;
    for collection in [CM, PP, CLUSTERS, CRDS] {
        let (code, list) = api
            .call("DELETE", &format!("{collection}?dryRun=All"), None)
            .await;
        assert_eq!(code, StatusCode::OK, "{collection}: {list}");
        assert!(!list["items"].as_array().unwrap().is_empty(), "{list}");
        // The same through a DeleteOptions body.
        let (code, list) = api
            .call(
                "DELETE",
                collection,
                Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]})),
            )
            .await;
        assert_eq!(code, StatusCode::OK, "{collection}: {list}");
    }
    let one = format!("{CM}/a");
    let (code, _) = api.call("DELETE", &format!("{one}?dryRun=All"), None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = api
        .call("DELETE", &one, Some(json!({"dryRun": ["All"]})))
        .await;
    assert_eq!(code, StatusCode::OK);
    let (code, body) = api
        .call("POST", &format!("{CM}?dryRun=All"), Some(configmap("dry")))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let mut changed = configmap("a");
    changed["data"]["k"] = json!("changed");
    let (code, _) = api
        .call("PUT", &format!("{one}?dryRun=All"), Some(changed))
        .await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = api
        .patch(
            &format!("{one}?dryRun=All"),
            "application/merge-patch+json",
            json!({"data": {"k": "patched"}}),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(snapshot(&api).await, before, "a dry run wrote");
}

#[tokio::test]
async fn dry_run_values_other_than_all_are_400_and_change_nothing() {
    let api = seeded().await;
    let before = snapshot(&api).await;
    let one = format!("{CM}/a");
    let mut changed = configmap("a");
    changed["data"]["k"] = json!("changed");
    for query in [
        "dryRun=Bogus",
        "dryRun=",
        "dryRun=All&dryRun=None",
        "dryRun=all",
    ] {
        let cases: Vec<(&str, String, Option<Value>)> = vec![
            ("DELETE", format!("{CM}?{query}"), None),
            ("DELETE", format!("{one}?{query}"), None),
            ("POST", format!("{CM}?{query}"), Some(configmap("new"))),
            ("PUT", format!("{one}?{query}"), Some(changed.clone())),
        ];
        for (method, path, body) in cases {
            let (code, answer) = api.call(method, &path, body).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
            assert_status(&answer, 400, "BadRequest");
            assert!(
                answer["message"].as_str().unwrap().contains("dryRun"),
                "{answer}"
            );
        }
        for ct in [
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ] {
            let (code, answer) = api
                .patch(
                    &format!("{one}?{query}"),
                    ct,
                    json!({"data": {"k": "patched"}}),
                )
                .await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{ct} {query}: {answer}");
        }
    }
    // In a DeleteOptions body too.
    let (code, answer) = api
        .call("DELETE", CM, Some(json!({"dryRun": ["Bogus"]})))
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(snapshot(&api).await, before);
}

#[tokio::test]
async fn invalid_delete_options_are_400_and_delete_nothing() {
    let api = seeded().await;
    let before = snapshot(&api).await;
    let bodies = [
        json!({"propagationPolicy": "Sideways"}),
        json!({"propagationPolicy": 1}),
        json!({"gracePeriodSeconds": "abc"}),
        json!({"orphanDependents": "yes"}),
        json!({"preconditions": "uid"}),
        json!({"preconditions": {"resourceVersion": "not-a-number"}}),
        json!({"dryRun": "All"}),
        json!({"kind": "ConfigMap"}),
        json!({"orphanDependents": true, "propagationPolicy": "Foreground"}),
    ];
    for target in [CM.to_string(), format!("{CM}/a")] {
        for body in &bodies {
            let (code, answer) = api.call("DELETE", &target, Some(body.clone())).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{target} {body}: {answer}");
            assert_status(&answer, 400, "BadRequest");
        }
        for query in [
            "gracePeriodSeconds=abc",
            "propagationPolicy=Sideways",
            "orphanDependents=maybe",
        ] {
            let (code, answer) = api.call("DELETE", &format!("{target}?{query}"), None).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{target}?{query}: {answer}");
        }
        // ListOptions Kubernetes refuses are a 422 naming the field, as kube-apiserver's.
        let query = "resourceVersionMatch=Bogus&resourceVersion=1";
        let (code, answer) = api.call("DELETE", &format!("{target}?{query}"), None).await;
        assert_eq!(
            code,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{target}?{query}: {answer}"
        );
        assert_status(&answer, 422, "Invalid");
        assert_eq!(
            answer["details"]["causes"][0]["field"],
            "resourceVersionMatch"
        );
        // A body that is not JSON at all.
        let (code, _) = api
            .send(
                "DELETE",
                &target,
                Some("application/json"),
                Body::from("{not json"),
                &[],
            )
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
    }
    assert_eq!(snapshot(&api).await, before);
    // A well-formed one still deletes, with its propagation policy.
    let (code, answer) = api
        .call(
            "DELETE",
            &format!("{CM}/a"),
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn json_patches_to_the_root_or_across_metadata_answer_without_panicking() {
    let api = seeded().await;
    let patches = [
        json!([{"op": "move", "from": "/metadata", "path": ""}]),
        json!([{"op": "copy", "from": "/metadata", "path": ""}]),
        json!([{"op": "copy", "from": "", "path": "/data/self"}]),
        json!([{"op": "move", "from": "/metadata/name", "path": "/data/name"}]),
        json!([{"op": "move", "from": "/metadata/labels", "path": ""}, {"op": "test", "path": "/x", "value": 1}]),
        json!([{"op": "copy", "from": "/metadata", "path": "/metadata/x"}, {"op": "remove", "path": "/missing"}]),
        json!([{"op": "remove", "path": ""}]),
        json!([{"op": "replace", "path": "", "value": 5}]),
        json!([{"op": "move", "from": "/data", "path": "/metadata"}]),
    ];
    for patch in patches {
        for name in ["a", "b"] {
            let path = format!("{CM}/{name}");
            let (code, answer) = api
                .patch(&path, "application/json-patch+json", patch.clone())
                .await;
            assert!(
                code.is_success() || is_status_4xx(code, &answer),
                "{patch}: {code} {answer}"
            );
        }
    }
    let (code, answer) = api
        .patch(
            &format!("{PP}/p1"),
            "application/json-patch+json",
            json!([{"op": "move", "from": "/metadata", "path": ""}]),
        )
        .await;
    assert!(is_status_4xx(code, &answer), "{code} {answer}");
}

#[tokio::test]
async fn a_patch_that_grows_the_object_past_the_limit_is_413_and_stores_nothing() {
    let api = TestApi::with_config(|c| c.limits.max_body_bytes = 256 * 1024).await;
    let mut cm = configmap("bomb");
    cm["data"]["k"] = json!("x".repeat(4096));
    api.call("POST", CM, Some(cm)).await;
    let before = api.call("GET", &format!("{CM}/bomb"), None).await.1;
    // Each copy doubles `data`: 20 of them would make a 4 GB object.
    let ops: Vec<Value> = (0..20)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/k{i}")}))
        .collect();
    let (code, answer) = api
        .patch(
            &format!("{CM}/bomb"),
            "application/json-patch+json",
            Value::Array(ops),
        )
        .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_status(&answer, 413, "RequestEntityTooLarge");
    let after = api.call("GET", &format!("{CM}/bomb"), None).await.1;
    assert_eq!(before, after);
}

#[tokio::test]
async fn strict_field_validation_applies_to_every_patch_type() {
    let api = seeded().await;
    for ct in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ] {
        let (code, answer) = api
            .patch(
                &format!("{PP}/p1?fieldValidation=Strict"),
                ct,
                json!({"spec": {"bogusField": 1}}),
            )
            .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{ct}: {answer}");
        assert!(answer.to_string().contains("bogusField"), "{answer}");
    }
    let (code, answer) = api
        .patch(
            &format!("{PP}/p1?fieldValidation=Strict"),
            "application/json-patch+json",
            json!([{"op": "add", "path": "/spec/bogusField", "value": 1}]),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    for value in ["Loose", "strict", "true"] {
        let (code, answer) = api
            .patch(
                &format!("{PP}/p1?fieldValidation={value}"),
                "application/merge-patch+json",
                json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{value}: {answer}");
        assert!(answer["message"]
            .as_str()
            .unwrap()
            .contains("fieldValidation"));
    }
}

#[tokio::test]
async fn an_empty_value_set_in_a_label_selector_is_an_error() {
    let api = seeded().await;
    for selector in ["a%20in%20()", "a%20notin%20()"] {
        let (code, answer) = api
            .call("GET", &format!("{CM}?labelSelector={selector}"), None)
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{selector}: {answer}");
        assert!(answer["message"]
            .as_str()
            .unwrap()
            .contains("labelSelector"));
        let (code, _) = api
            .call("DELETE", &format!("{CM}?labelSelector={selector}"), None)
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
    }
    assert_eq!(
        api.call("GET", &format!("{CM}/a"), None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_body_whose_identity_differs_from_the_url_is_400_never_rewritten() {
    let api = seeded().await;
    let before = snapshot(&api).await;
    let cases = [
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}}),
            "the name of the object (b) does not match the name on the URL (a)",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "other"}}),
            "the namespace of the provided object (other) does not match the namespace sent on the request (default)",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 7, "namespace": "default"}}),
            "metadata.name",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": ["default"]}}),
            "metadata.namespace",
        ),
        (
            json!({"apiVersion": 1, "kind": "ConfigMap", "metadata": {"name": "a"}}),
            "apiVersion",
        ),
    ];
    for (body, want) in cases {
        let (code, answer) = api
            .call("PUT", &format!("{CM}/a"), Some(body.clone()))
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(want),
            "{body}: {answer}"
        );
    }
    assert_eq!(snapshot(&api).await, before);
}

#[tokio::test]
async fn a_handler_panic_is_a_500_status() {
    use tower::ServiceExt;
    let router = flotilla_server::api::harden(axum::Router::new().route(
        "/boom",
        axum::routing::get(|| async {
            let v: Vec<u8> = Vec::new();
            v[v.len() + 1].to_string()
        }),
    ));
    let resp = router
        .oneshot(
            axum::http::Request::get("/boom")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_status(&body, 500, "InternalError");
    assert!(
        !body["message"]
            .as_str()
            .unwrap()
            .contains("index out of bounds"),
        "internals stay in the log: {body}"
    );
}
