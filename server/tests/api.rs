//! The API through the router: every verb, content type and error of docs/api.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{assert_status, TestApi};
use flotilla_server::testing::eventually;
use serde_json::{json, Value};

const PP: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";

fn policy(name: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "a"}},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
            "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}}
        }
    })
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    })
}

#[tokio::test]
async fn public_endpoints_need_no_token_and_everything_else_does() {
    let api = TestApi::new().await;
    for path in ["/healthz", "/readyz", "/version"] {
        let req = axum::http::Request::get(path).body(Body::empty()).unwrap();
        let resp = tower::ServiceExt::oneshot(api.router.clone(), req)
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    for (path, auth) in [
        ("/api/v1/namespaces/default/configmaps", None),
        ("/apis", Some("Bearer wrong")),
        ("/metrics", Some("Basic abc")),
        // A token that is sent is checked on the probes too, as kube-apiserver does.
        ("/healthz", Some("Bearer wrong")),
        ("/readyz", Some("Bearer wrong")),
        ("/livez", Some("Bearer wrong")),
        ("/version", Some("Bearer wrong")),
    ] {
        let mut req = axum::http::Request::get(path);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = tower::ServiceExt::oneshot(api.router.clone(), req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_status(
            &serde_json::from_slice(&bytes).unwrap(),
            401,
            "Unauthorized",
        );
    }
}

#[tokio::test]
async fn discovery_lists_karmada_and_kubernetes_kinds() {
    let api = TestApi::new().await;
    let (s, v) = api.call("GET", "/version", None).await;
    assert_eq!((s, v["major"].as_str()), (StatusCode::OK, Some("1")));
    let (_, apis) = api.call("GET", "/apis", None).await;
    let groups: Vec<&str> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "apps",
        "cluster.karmada.io",
        "policy.karmada.io",
        "work.karmada.io",
        "batch",
    ] {
        assert!(groups.contains(&g), "{g} in {groups:?}");
    }
    let (_, list) = api
        .call("GET", "/apis/work.karmada.io/v1alpha2", None)
        .await;
    let rb = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "resourcebindings")
        .unwrap();
    assert_eq!(rb["shortNames"], json!(["rb"]));
    assert_eq!(rb["kind"], "ResourceBinding");
    assert_eq!(rb["namespaced"], true);
    let (_, core) = api.call("GET", "/api/v1", None).await;
    assert!(core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "configmaps"));
    let (s, body) = api.call("GET", "/apis/nope.io/v1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    let (s, idx) = api.call("GET", "/openapi/v3", None).await;
    assert_eq!(s, StatusCode::OK);
    let url = idx["paths"]["apis/policy.karmada.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, doc) = api.call("GET", &url, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(doc["paths"].as_object().unwrap().len() >= 2);
}

#[tokio::test]
async fn create_get_list_update_delete_with_defaults() {
    let api = TestApi::new().await;
    let (s, created) = api.call("POST", PP, Some(policy("p1"))).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert!(created["metadata"]["uid"].as_str().is_some());
    assert_eq!(created["metadata"]["generation"], 1);
    // Flotilla's default tolerations were added.
    let tolerations = created["spec"]["placement"]["clusterTolerations"]
        .as_array()
        .unwrap();
    assert!(tolerations
        .iter()
        .any(|t| t["key"] == "cluster.karmada.io/not-ready"
            && t["effect"] == "NoExecute"
            && t["tolerationSeconds"] == 300));
    let (s, got) = api.call("GET", &format!("{PP}/p1"), None).await;
    assert_eq!((s, &got), (StatusCode::OK, &created));
    let (s, list) = api.call("GET", PP, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["kind"], "PropagationPolicyList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    let mut changed = got.clone();
    changed["spec"]["priority"] = json!(5);
    let (s, updated) = api
        .call("PUT", &format!("{PP}/p1"), Some(changed.clone()))
        .await;
    assert_eq!(s, StatusCode::OK, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);
    // The same write again with the old resourceVersion is a conflict.
    let (s, body) = api.call("PUT", &format!("{PP}/p1"), Some(changed)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_status(&body, 409, "Conflict");

    let (s, _) = api.call("DELETE", &format!("{PP}/p1"), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, body) = api.call("GET", &format!("{PP}/p1"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    assert_eq!(body["details"]["name"], "p1");
}

#[tokio::test]
async fn yaml_bodies_and_yaml_answers() {
    let api = TestApi::new().await;
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\ndata:\n  a: \"1\"\n";
    let (s, text) = api
        .send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some("application/yaml"),
            yaml,
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{text}");
    let (s, text) = api
        .send(
            "GET",
            "/api/v1/namespaces/default/configmaps/cm1",
            None,
            Body::empty(),
            &[("accept", "application/yaml")],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        text.contains("name: cm1") && text.contains("namespace: default"),
        "{text}"
    );
}

#[tokio::test]
async fn errors_are_status_objects_with_the_right_codes() {
    let api = TestApi::new().await;
    api.call("POST", PP, Some(policy("dup"))).await;
    let (s, body) = api.call("POST", PP, Some(policy("dup"))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_status(&body, 409, "AlreadyExists");

    let (s, text) = api
        .send("POST", PP, Some("application/json"), "{not json", &[])
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_status(&serde_json::from_str(&text).unwrap(), 400, "BadRequest");

    let (s, text) = api.send("POST", PP, Some("text/plain"), "x", &[]).await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_status(
        &serde_json::from_str(&text).unwrap(),
        415,
        "UnsupportedMediaType",
    );

    let (s, text) = api
        .send(
            "GET",
            PP,
            None,
            Body::empty(),
            &[("accept", "application/vnd.kubernetes.protobuf")],
        )
        .await;
    assert_eq!(s, StatusCode::NOT_ACCEPTABLE);
    assert_status(&serde_json::from_str(&text).unwrap(), 406, "NotAcceptable");

    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                     "data": {"x": "y".repeat(4 * 1024 * 1024)}});
    let (s, text) = api
        .send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            big.to_string(),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_status(
        &serde_json::from_str(&text).unwrap(),
        413,
        "RequestEntityTooLarge",
    );

    let (s, body) = api
        .call("POST", &format!("{PP}/named"), Some(policy("named")))
        .await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_status(&body, 405, "MethodNotAllowed");

    let mut wrong_ns = policy("p");
    wrong_ns["metadata"]["namespace"] = json!("other");
    let (s, body) = api.call("POST", PP, Some(wrong_ns)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("namespace"),
        "{body}"
    );

    let mut wrong_kind = policy("p");
    wrong_kind["kind"] = json!("Deployment");
    let (s, _) = api.call("POST", PP, Some(wrong_kind)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn invalid_policies_are_422_with_the_field_named() {
    let api = TestApi::new().await;
    let mut both = policy("both");
    both["spec"]["placement"]["clusterAffinities"] =
        json!([{"affinityName": "a", "clusterNames": ["member1"]}]);
    let (s, body) = api.call("POST", PP, Some(both)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_status(&body, 422, "Invalid");
    let causes = body["details"]["causes"].as_array().unwrap();
    assert!(
        causes
            .iter()
            .any(|c| c["field"].as_str().unwrap().starts_with("spec.placement")),
        "{body}"
    );
    // The field is named once: in `field`, and before the message in the summary.
    for c in causes {
        let field = c["field"].as_str().unwrap();
        assert!(!c["message"].as_str().unwrap().contains(field), "{body}");
        assert!(body["message"].as_str().unwrap().contains(field), "{body}");
    }

    let mut spread = policy("spread");
    spread["spec"]["placement"]["spreadConstraints"] =
        json!([{"spreadByField": "cluster", "minGroups": 3, "maxGroups": 2}]);
    let (s, body) = api.call("POST", PP, Some(spread)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("spreadConstraints[0]"),
        "{body}"
    );

    let mut bad_name = policy("Bad_Name");
    bad_name["metadata"]["name"] = json!("Bad_Name");
    let (s, body) = api.call("POST", PP, Some(bad_name)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("metadata.name"),
        "{body}"
    );

    // Nothing was stored by any of them.
    let (_, list) = api.call("GET", PP, None).await;
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_fields_of_own_kinds() {
    let api = TestApi::new().await;
    let mut p = policy("strict");
    p["spec"]["placment"] = json!({});
    let (s, body) = api
        .call(
            "POST",
            &format!("{PP}?fieldValidation=Strict"),
            Some(p.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("placment"),
        "{body}"
    );
    // Without Strict the unknown field is accepted (and dropped by the typed kind).
    let (s, _) = api.call("POST", PP, Some(p)).await;
    assert_eq!(s, StatusCode::CREATED);
    // Templates are free-form: Strict accepts any field.
    let mut d = deployment("free", 1);
    d["spec"]["somethingNew"] = json!(true);
    let (s, created) = api
        .call("POST", &format!("{DEPLOY}?fieldValidation=Strict"), Some(d))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(created["spec"]["somethingNew"], true);
}

#[tokio::test]
async fn every_patch_type() {
    let api = TestApi::new().await;
    api.call("POST", DEPLOY, Some(deployment("web", 2))).await;
    let path = format!("{DEPLOY}/web");
    let (s, v) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(
        (s, v["spec"]["replicas"].clone()),
        (StatusCode::OK, json!(3))
    );
    let (s, v) = api
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]),
        )
        .await;
    assert_eq!(
        (s, v["spec"]["replicas"].clone()),
        (StatusCode::OK, json!(4))
    );
    let (s, v) = api
        .patch(&path, "application/strategic-merge-patch+json",
               json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"],
        json!([{"name": "c", "image": "nginx:2"}])
    );
    // Server-side apply creates when missing and merges when present.
    let (s, v) = api
        .patch(
            &format!("{DEPLOY}/applied?fieldManager=kubectl"),
            "application/apply-patch+yaml",
            deployment("applied", 1),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = api
        .patch(
            &format!("{DEPLOY}/applied?fieldManager=kubectl"),
            "application/apply-patch+yaml",
            deployment("applied", 5),
        )
        .await;
    assert_eq!(
        (s, v["spec"]["replicas"].clone()),
        (StatusCode::OK, json!(5))
    );
    // Failing JSON patch test op: 422; unknown patch type: 415; missing object: 404.
    let (s, _) = api
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "test", "path": "/spec/replicas", "value": 99}]),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let (s, _) = api.patch(&path, "application/xml", json!({})).await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (s, _) = api
        .patch(
            &format!("{DEPLOY}/missing"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn status_subresource_is_separate_from_spec() {
    let api = TestApi::new().await;
    let (_, d) = api.call("POST", DEPLOY, Some(deployment("s", 1))).await;
    let mut with_status = d.clone();
    with_status["status"] = json!({"readyReplicas": 1});
    let (s, v) = api
        .call(
            "PUT",
            &format!("{DEPLOY}/s/status"),
            Some(with_status.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"]["readyReplicas"], 1);
    assert_eq!(v["metadata"]["generation"], 1);
    // A main-resource update cannot change status.
    let mut main = v.clone();
    main["status"] = json!({"readyReplicas": 7});
    main["spec"]["replicas"] = json!(2);
    let (_, v) = api.call("PUT", &format!("{DEPLOY}/s"), Some(main)).await;
    assert_eq!(v["status"]["readyReplicas"], 1);
    assert_eq!(v["metadata"]["generation"], 2);
    let (s, v) = api
        .patch(
            &format!("{DEPLOY}/s/status"),
            "application/merge-patch+json",
            json!({"status": {"readyReplicas": 2}}),
        )
        .await;
    assert_eq!(
        (s, v["status"]["readyReplicas"].clone()),
        (StatusCode::OK, json!(2))
    );
    let (s, _) = api.call("GET", &format!("{DEPLOY}/s/other"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_spec_replicas() {
    let api = TestApi::new().await;
    let (_, d) = api.call("POST", DEPLOY, Some(deployment("w", 2))).await;
    let scale = format!("{DEPLOY}/w/scale");
    let (s, v) = api.call("GET", &scale, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["kind"], "Scale");
    assert_eq!(v["apiVersion"], "autoscaling/v1");
    assert_eq!(v["spec"]["replicas"], 2);
    assert_eq!(
        v["metadata"]["resourceVersion"],
        d["metadata"]["resourceVersion"]
    );
    // kubectl scale: a merge patch of the Scale.
    let (s, v) = api
        .patch(
            &scale,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(
        (s, v["spec"]["replicas"].clone()),
        (StatusCode::OK, json!(5)),
        "{v}"
    );
    let (_, live) = api.call("GET", &format!("{DEPLOY}/w"), None).await;
    assert_eq!(live["spec"]["replicas"], 5);
    assert_eq!(live["metadata"]["generation"], 2);
    // PUT with a stale resourceVersion is a conflict; without one it is applied.
    let stale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "w", "resourceVersion": d["metadata"]["resourceVersion"]},
        "spec": {"replicas": 1}});
    let (s, _) = api.call("PUT", &scale, Some(stale)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let fresh = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "w"}, "spec": {"replicas": 1}});
    let (s, v) = api.call("PUT", &scale, Some(fresh)).await;
    assert_eq!(
        (s, v["spec"]["replicas"].clone()),
        (StatusCode::OK, json!(1)),
        "{v}"
    );
    // Bad replicas: 422 naming the field; nothing changes.
    let (s, v) = api
        .patch(
            &scale,
            "application/merge-patch+json",
            json!({"spec": {"replicas": -3}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["details"]["causes"][0]["field"], "spec.replicas", "{v}");
    let (_, live) = api.call("GET", &format!("{DEPLOY}/w"), None).await;
    assert_eq!(live["spec"]["replicas"], 1);
    // Only replicated workloads scale.
    let (s, _) = api
        .call(
            "GET",
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies/p/scale",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = api
        .call("GET", &format!("{DEPLOY}/missing/scale"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let api = TestApi::new().await;
    let mut d = deployment("fin", 1);
    d["metadata"]["finalizers"] = json!(["example.com/hold"]);
    api.call("POST", DEPLOY, Some(d)).await;
    let (s, v) = api.call("DELETE", &format!("{DEPLOY}/fin"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["metadata"]["deletionTimestamp"].is_string(), "{v}");
    let (s, _) = api.call("GET", &format!("{DEPLOY}/fin"), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = api
        .patch(
            &format!("{DEPLOY}/fin"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = api.call("GET", &format!("{DEPLOY}/fin"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn owner_deletion_collects_dependents_unless_orphaned() {
    let api = TestApi::new().await;
    let (_, owner) = api.call("POST", DEPLOY, Some(deployment("owner", 1))).await;
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
            "name": "owner", "uid": owner["metadata"]["uid"]}]}})
    };
    let cms = "/api/v1/namespaces/default/configmaps";
    api.call("POST", cms, Some(cm("dep1"))).await;
    let (s, _) = api
        .call(
            "DELETE",
            &format!("{DEPLOY}/owner?propagationPolicy=Orphan"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, kept) = api.call("GET", &format!("{cms}/dep1"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        kept["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|r| r.is_empty()),
        "{kept}"
    );

    let (_, owner) = api.call("POST", DEPLOY, Some(deployment("owner", 1))).await;
    let mut c = cm("dep2");
    c["metadata"]["ownerReferences"][0]["uid"] = owner["metadata"]["uid"].clone();
    api.call("POST", cms, Some(c)).await;
    api.call("DELETE", &format!("{DEPLOY}/owner"), None).await;
    eventually(
        "the dependent collected after background deletion of its owner",
        std::time::Duration::from_secs(10),
        || async {
            let (s, _) = api.call("GET", &format!("{cms}/dep2"), None).await;
            if s == StatusCode::NOT_FOUND {
                Ok(())
            } else {
                Err(format!("GET dep2 answers {s}"))
            }
        },
    )
    .await;
    let (s, body) = api
        .call(
            "DELETE",
            &format!("{DEPLOY}/x?propagationPolicy=Sideways"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn selectors_and_pagination() {
    let api = TestApi::new().await;
    for i in 0..5 {
        let mut d = deployment(&format!("d{i}"), 1);
        d["metadata"]["labels"]["tier"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        api.call("POST", DEPLOY, Some(d)).await;
    }
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, v) = api
        .call("GET", &format!("{DEPLOY}?labelSelector=tier%3Deven"), None)
        .await;
    assert_eq!(names(&v), ["d0", "d2", "d4"]);
    let (_, v) = api
        .call(
            "GET",
            &format!("{DEPLOY}?labelSelector=tier%20in%20(odd),app!%3Dd1"),
            None,
        )
        .await;
    assert_eq!(names(&v), ["d3"]);
    let (_, v) = api
        .call(
            "GET",
            &format!("{DEPLOY}?fieldSelector=metadata.name%3Dd2"),
            None,
        )
        .await;
    assert_eq!(names(&v), ["d2"]);
    let (s, body) = api
        .call("GET", &format!("{DEPLOY}?labelSelector=a%20in%20(b"), None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    let mut seen = Vec::new();
    let mut path = format!("{DEPLOY}?limit=2");
    loop {
        let (_, page) = api.call("GET", &path, None).await;
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => path = format!("{DEPLOY}?limit=2&continue={c}"),
            _ => break,
        }
    }
    assert_eq!(seen, ["d0", "d1", "d2", "d3", "d4"]);
    // All namespaces.
    let (_, v) = api.call("GET", "/apis/apps/v1/deployments", None).await;
    assert_eq!(names(&v).len(), 5);
}

#[tokio::test]
async fn tables_for_kubectl_get() {
    let api = TestApi::new().await;
    let cluster = json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "member1"}, "spec": {"syncMode": "Pull"}});
    let (s, body) = api.call("POST", CLUSTERS, Some(cluster)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let (s, text) = api
        .send("GET", CLUSTERS, None, Body::empty(), &[("accept", accept)])
        .await;
    assert_eq!(s, StatusCode::OK);
    let t: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["rows"][0]["cells"][0], "member1");
    assert_eq!(t["rows"][0]["cells"][2], "Pull");
}

#[tokio::test]
async fn event_tables_print_the_columns_kubectl_prints() {
    let api = TestApi::new().await;
    let at = |days: i64| {
        (chrono::Utc::now() - chrono::Duration::days(days))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let events = "/api/v1/namespaces/default/events";
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "nginx.17", "namespace": "default"},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx",
                           "namespace": "default"},
        "reason": "ScheduleBindingSucceed", "message": "Binding has been scheduled", "type": "Normal",
        "source": {"component": "default-scheduler"}, "count": 2,
        "firstTimestamp": at(40), "lastTimestamp": at(30)});
    let (s, body) = api.call("POST", events, Some(event)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    for path in [events.to_string(), format!("{events}/nginx.17")] {
        let (s, text) = api
            .send("GET", &path, None, Body::empty(), &[("accept", accept)])
            .await;
        assert_eq!(s, StatusCode::OK, "{path}: {text}");
        let t: Value = serde_json::from_str(&text).unwrap();
        let shown: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            shown,
            ["Last Seen", "Type", "Reason", "Object", "Message"],
            "{path}"
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "30d",
                "Normal",
                "ScheduleBindingSucceed",
                "deployment/nginx",
                "",
                "default-scheduler",
                "Binding has been scheduled",
                "40d",
                2,
                "nginx.17"
            ]),
            "{path}"
        );
    }
}

#[tokio::test]
async fn crds_register_kinds_and_free_form_kinds_work_without_one() {
    let api = TestApi::new().await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "flinkdeployments.flink.apache.org"},
        "spec": {"group": "flink.apache.org", "scope": "Namespaced",
                 "names": {"plural": "flinkdeployments", "singular": "flinkdeployment", "kind": "FlinkDeployment"},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (s, body) = api.call("POST", crds, Some(crd)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, list) = api
        .call("GET", "/apis/flink.apache.org/v1beta1", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["resources"][0]["kind"], "FlinkDeployment");
    let flink = json!({"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "foo"}, "spec": {"job": {"parallelism": 2, "jarURI": "local:///x.jar"}}});
    let path = "/apis/flink.apache.org/v1beta1/namespaces/default/flinkdeployments";
    let (s, created) = api.call("POST", path, Some(flink)).await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(created["spec"]["job"]["parallelism"], 2);
    // A bad CRD names its field.
    let (s, body) = api
        .call("POST", crds, Some(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "x.y.io"}, "spec": {"group": "y.io", "names": {"plural": "x", "kind": "X"}, "versions": [{"name": "v1"}]}})))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("spec.scope"),
        "{body}"
    );
    // curl can POST a kind no CRD declares.
    let widget = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}});
    let (s, created) = api
        .call(
            "POST",
            "/apis/example.io/v1/namespaces/default/widgets",
            Some(widget),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let (s, got) = api
        .call(
            "GET",
            "/apis/example.io/v1/namespaces/default/widgets/w",
            None,
        )
        .await;
    assert_eq!((s, got["spec"]["size"].clone()), (StatusCode::OK, json!(3)));
    // ... but core kinds are only the known ones.
    let (s, _) = api
        .call("GET", "/api/v1/namespaces/default/gizmos", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metrics_count_requests() {
    let api = TestApi::new().await;
    api.call("GET", DEPLOY, None).await;
    let (s, text) = api.send("GET", "/metrics", None, Body::empty(), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(text.contains("flotilla_apiserver_requests_total{code=\"200\",resource=\"deployments\",verb=\"list\"}"), "{text}");
    assert!(text.contains("flotilla_apiserver_request_duration_seconds"));
}

#[tokio::test]
async fn registration_hands_out_credentials_scoped_to_one_cluster() {
    let api = TestApi::new().await;
    let body =
        json!({"clusterName": "member1", "region": "eu", "labels": {"tier": "gold"}}).to_string();
    let register = |token: &'static str, body: String| {
        let api = &api;
        async move {
            let (s, text) = api
                .send_as(
                    token,
                    "POST",
                    "/flotilla/v1/register",
                    Some("application/json"),
                    body,
                    &[],
                )
                .await;
            (s, serde_json::from_str::<Value>(&text).unwrap())
        }
    };
    let (s, v) = register("wrong", body.clone()).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_status(&v, 401, "Unauthorized");
    let (s, v) = register(common::TOKEN, body.clone()).await;
    assert_eq!(
        s,
        StatusCode::UNAUTHORIZED,
        "the admin token is not the join token"
    );
    let (s, v2) = register(common::JOIN_TOKEN, body.clone()).await;
    assert_eq!(s, StatusCode::OK, "{v} {v2}");
    let cred = v2["token"].as_str().unwrap().to_string();
    let (_, cluster) = api.call("GET", &format!("{CLUSTERS}/member1"), None).await;
    assert_eq!(cluster["spec"]["syncMode"], "Pull");
    assert_eq!(cluster["spec"]["region"], "eu");
    assert_eq!(cluster["metadata"]["labels"]["tier"], "gold");

    let as_agent = |method: &'static str, path: String| {
        let api = &api;
        let cred = cred.clone();
        async move {
            api.send_as(&cred, method, &path, None, Body::empty(), &[])
                .await
                .0
        }
    };
    assert_eq!(
        as_agent("GET", format!("{CLUSTERS}/member1")).await,
        StatusCode::OK
    );
    assert_eq!(
        as_agent(
            "GET",
            "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member1/works".into()
        )
        .await,
        StatusCode::OK
    );
    for path in [
        format!("{CLUSTERS}/member2"),
        "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member2/works".to_string(),
        PP.to_string(),
        "/api/v1/namespaces/karmada-cluster/secrets".to_string(),
    ] {
        let (s, text) = api
            .send_as(&cred, "GET", &path, None, Body::empty(), &[])
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}");
        assert_status(&serde_json::from_str(&text).unwrap(), 403, "Forbidden");
    }
    assert_eq!(
        as_agent("DELETE", format!("{CLUSTERS}/member1")).await,
        StatusCode::FORBIDDEN
    );

    // Registering again needs an admin's annotation (see tests/authz_matrix.rs) and replaces
    // the credential.
    let allow = json!({"metadata": {"annotations": {"flotilla.io/allow-reregistration": "true"}}});
    let member1 = format!("{CLUSTERS}/member1");
    api.patch(&member1, "application/merge-patch+json", allow)
        .await;
    let (_, v3) = register(common::JOIN_TOKEN, body.clone()).await;
    assert_ne!(v3["token"], v2["token"]);
    assert_eq!(
        as_agent("GET", format!("{CLUSTERS}/member1")).await,
        StatusCode::UNAUTHORIZED
    );

    // Bad names and Push clusters are refused.
    let (s, v) = register(
        common::JOIN_TOKEN,
        json!({"clusterName": "Bad_Name"}).to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["details"]["causes"][0]["field"], "clusterName");
    let (s, _) = register(common::JOIN_TOKEN, "{\"clusterName\": 3}".into()).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    api.call("POST", CLUSTERS, Some(json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "pushed"}, "spec": {"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1"}}))).await;
    let (s, _) = register(
        common::JOIN_TOKEN,
        json!({"clusterName": "pushed"}).to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_request_past_its_deadline_is_504() {
    let api = TestApi::with_config(|c| {
        c.limits.request_timeout = std::time::Duration::from_millis(50);
    })
    .await;
    // A client that never finishes sending its body.
    let stalled = Body::from_stream(futures::stream::pending::<
        Result<bytes::Bytes, std::io::Error>,
    >());
    let (s, text) = api
        .send("POST", DEPLOY, Some("application/json"), stalled, &[])
        .await;
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT);
    assert_status(&serde_json::from_str(&text).unwrap(), 504, "Timeout");
    let (_, list) = api.call("GET", DEPLOY, None).await;
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn delete_collection_and_dry_run() {
    let api = TestApi::new().await;
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut d = deployment(name, 1);
        d["metadata"]["labels"]["tier"] = json!(tier);
        api.call("POST", DEPLOY, Some(d)).await;
    }
    // dryRun=All validates and answers without storing.
    let (s, v) = api
        .call(
            "POST",
            &format!("{DEPLOY}?dryRun=All"),
            Some(deployment("dry", 1)),
        )
        .await;
    assert_eq!(
        (s, v["metadata"]["name"].clone()),
        (StatusCode::CREATED, json!("dry"))
    );
    let (s, _) = api.call("GET", &format!("{DEPLOY}/dry"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = api
        .call("DELETE", &format!("{DEPLOY}/a?dryRun=All"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = api.call("GET", &format!("{DEPLOY}/a"), None).await;
    assert_eq!(s, StatusCode::OK, "a dry-run delete keeps the object");
    // DELETE on a collection with a selector.
    let (s, v) = api
        .call("DELETE", &format!("{DEPLOY}?labelSelector=tier%3Dx"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let (_, list) = api.call("GET", DEPLOY, None).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c"]);
}

#[tokio::test]
async fn explain_shows_a_cluster_blocked_by_application_failover() {
    use flotilla_api::kinds::well_known;
    let api = TestApi::new().await;
    for name in ["member1", "member2"] {
        let mut c = api
            .store
            .create(
                &well_known::clusters(),
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": name}, "spec": {"syncMode": "Pull"}}),
            )
            .await
            .unwrap();
        c["status"] = json!({"apiEnablements": [{"groupVersion": "apps/v1",
            "resources": [{"name": "deployments", "kind": "Deployment"}]}]});
        api.store
            .update_status(&well_known::clusters(), c)
            .await
            .unwrap();
    }
    let state = json!({"left": [{"cluster": "member1", "evictedAt": "2026-01-01T00:00:00Z",
                                  "blockedUntil": "2999-01-01T00:00:00Z"}],
                       "streak": 1, "lastFailover": "2026-01-01T00:00:00Z"});
    api.store
        .create(
            &well_known::resource_bindings(),
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": "nginx-deployment", "namespace": "default",
                             "annotations": {"applicationfailover.flotilla.io/state": state.to_string()}},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                         "replicas": 1,
                         "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}},
                         "failover": {"application": {"decisionConditions": {"tolerationSeconds": 60}}},
                         "clusters": [{"name": "member2", "replicas": 1}]}}),
        )
        .await
        .unwrap();
    let (code, out) = api
        .call(
            "GET",
            "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment/explain",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{out}");
    let member1 = out["clusters"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "member1"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(member1["filter"], "FailoverBlock", "{out}");
    assert_eq!(out["failover"]["blocked"][0]["cluster"], "member1", "{out}");
    assert_eq!(
        out["failover"]["blocked"][0]["until"], "2999-01-01T00:00:00Z",
        "{out}"
    );
    assert_eq!(out["failover"]["applicationFailoverStreak"], 1, "{out}");
    assert!(
        out["arithmetic"]
            .as_array()
            .is_some_and(|ls| ls.iter().any(|l| l
                .as_str()
                .is_some_and(|l| l.contains("failed over from member1")))),
        "{out}"
    );
}

/// docs/members.md, "One timing for server and agents": every answer, refusals included,
/// carries the periods pull agents are asked to keep; a server without controllers watches
/// no member and advertises nothing.
#[tokio::test]
async fn every_answer_advertises_the_member_timing_of_the_grace_period() {
    use flotilla_server::controllers::settings::ControllerSettings;
    use tower::ServiceExt;
    async fn header(api: &TestApi, token: &str, path: &str) -> (StatusCode, Option<String>) {
        let req = axum::http::Request::builder()
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let resp = api.router.clone().oneshot(req).await.unwrap();
        let value = resp
            .headers()
            .get("flotilla-member-timing")
            .map(|v| v.to_str().unwrap().to_string());
        (resp.status(), value)
    }
    let api = TestApi::with_config(|c| {
        let mut settings = ControllerSettings::default();
        settings.health.grace.monitor = std::time::Duration::from_secs(2);
        c.controllers = Some(settings);
    })
    .await;
    let want = Some("leaseRenewIntervalMs=500, clusterStatusUpdateFrequencyMs=500".to_string());
    assert_eq!(
        header(&api, common::TOKEN, CLUSTERS).await,
        (StatusCode::OK, want.clone())
    );
    assert_eq!(
        header(&api, "not-a-token", CLUSTERS).await,
        (StatusCode::UNAUTHORIZED, want)
    );
    let defaults =
        TestApi::with_config(|c| c.controllers = Some(ControllerSettings::default())).await;
    assert_eq!(
        header(&defaults, common::TOKEN, "/version")
            .await
            .1
            .as_deref(),
        Some("leaseRenewIntervalMs=10000, clusterStatusUpdateFrequencyMs=10000")
    );
    let none = TestApi::with_config(|c| c.controllers = None).await;
    assert_eq!(header(&none, common::TOKEN, "/version").await.1, None);
}

#[tokio::test]
async fn events_k8s_io_and_core_events_are_one_event() {
    let api = TestApi::new().await;
    const V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
    const CORE: &str = "/api/v1/namespaces/default/events";
    // Discovery lists the group.
    let (s, doc) = api.call("GET", "/apis/events.k8s.io/v1", None).await;
    assert_eq!(s, StatusCode::OK, "{doc}");
    assert_eq!(doc["resources"][0]["name"], "events");
    let recorded = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1"},
        "eventTime": "2026-01-01T00:00:00.000001Z",
        "reportingController": "example.com/operator", "reportingInstance": "operator-0",
        "action": "Scale", "reason": "Scaled", "note": "scaled to 3", "type": "Normal",
        "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "default"},
    });
    let (s, created) = api.call("POST", V1, Some(recorded.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "scaled to 3");
    // The same Event through core/v1.
    let (s, core) = api.call("GET", &format!("{CORE}/web.1"), None).await;
    assert_eq!(s, StatusCode::OK, "{core}");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "scaled to 3");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["reportingComponent"], "example.com/operator");
    assert!(core.get("note").is_none() && core.get("regarding").is_none());
    // A core Event through events.k8s.io/v1.
    let legacy = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "old.1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started", "message": "started", "type": "Normal",
        "source": {"component": "kubelet"}, "count": 3,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"});
    let (s, body) = api.call("POST", CORE, Some(legacy)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (s, list) = api.call("GET", V1, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["apiVersion"], "events.k8s.io/v1");
    let old = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metadata"]["name"] == "old.1")
        .unwrap();
    assert_eq!(old["note"], "started");
    assert_eq!(old["deprecatedCount"], 3);
    assert_eq!(old["deprecatedSource"]["component"], "kubelet");
    assert_eq!(old["regarding"]["name"], "p");
    // Selectors read the served form.
    let (_, selected) = api
        .call(
            "GET",
            &format!("{V1}?fieldSelector=regarding.name%3Dweb"),
            None,
        )
        .await;
    assert_eq!(selected["items"].as_array().unwrap().len(), 1, "{selected}");
    // Kubernetes' rules for events.k8s.io/v1 writes: 422 naming the fields.
    let mut bad = recorded.clone();
    bad["metadata"]["name"] = json!("web.2");
    bad["deprecatedCount"] = json!(2);
    bad.as_object_mut().unwrap().remove("reportingController");
    let (s, body) = api.call("POST", V1, Some(bad)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["reportingController", "count"]);
    assert_eq!(body["details"]["group"], "events.k8s.io");
    // The Recorder's second publish: a merge patch adding the series.
    let (s, patched) = api
        .patch(
            &format!("{V1}/web.1"),
            "application/merge-patch+json",
            json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:05.000000Z"}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{patched}");
    assert_eq!(patched["series"]["count"], 2);
    let (_, core) = api.call("GET", &format!("{CORE}/web.1"), None).await;
    assert_eq!(core["series"]["count"], 2);
    // Anything else is immutable through events.k8s.io/v1.
    let (s, body) = api
        .patch(
            &format!("{V1}/web.1"),
            "application/merge-patch+json",
            json!({"note": "rewritten"}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "message");
    // kubectl's table of core Events shows it.
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let (_, text) = api
        .send("GET", CORE, None, Body::empty(), &[("accept", accept)])
        .await;
    assert!(
        text.contains("deployment/web") && text.contains("scaled to 3"),
        "{text}"
    );
    // A watch of the view streams the view's form, its bookmarks of the view's kind.
    let (s, text) = api
        .send(
            "GET",
            &format!("{V1}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"),
            None,
            Body::empty(),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let added: Vec<&Value> = lines.iter().filter(|e| e["type"] == "ADDED").collect();
    assert_eq!(added.len(), 2, "{text}");
    assert!(
        added
            .iter()
            .all(|e| e["object"]["apiVersion"] == "events.k8s.io/v1"),
        "{text}"
    );
    let end = lines
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("the end bookmark");
    assert_eq!(end["object"]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // Metadata only, in a watch too.
    let accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let (_, text) = api
        .send(
            "GET",
            &format!("{CORE}?watch=true&timeoutSeconds=1"),
            None,
            Body::empty(),
            &[("accept", accept)],
        )
        .await;
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["object"]["kind"], "PartialObjectMetadata", "{text}");
    assert!(first["object"].get("message").is_none(), "{text}");
    // Deleted through one API, gone from both.
    let (s, _) = api.call("DELETE", &format!("{V1}/web.1"), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = api.call("GET", &format!("{CORE}/web.1"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn namespaces_have_a_phase_nodes_a_status_and_metadata_only_answers() {
    let api = TestApi::new().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}});
    let (s, created) = api.call("POST", "/api/v1/namespaces", Some(ns)).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert_eq!(created["status"]["phase"], "Active");
    let held = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    api.call("POST", "/api/v1/namespaces", Some(held)).await;
    let (s, deleting) = api.call("DELETE", "/api/v1/namespaces/held", None).await;
    assert_eq!(s, StatusCode::OK, "{deleting}");
    assert_eq!(deleting["status"]["phase"], "Terminating");
    let (_, list) = api.call("GET", "/api/v1/namespaces", None).await;
    let phases: Vec<(&str, &str)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap(),
                n["status"]["phase"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(phases, [("apps", "Active"), ("held", "Terminating")]);

    // Nodes: cluster-scoped, `no`, their status a subresource.
    let (_, doc) = api.call("GET", "/api/v1", None).await;
    let nodes = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "nodes")
        .expect("nodes in discovery");
    assert_eq!(nodes["namespaced"], false);
    assert_eq!(nodes["shortNames"], json!(["no"]));
    assert!(doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "nodes/status"));
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8"}}});
    let (s, created) = api.call("POST", "/api/v1/nodes", Some(node)).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    assert!(
        created.get("status").is_none(),
        "a create drops the status: {created}"
    );
    let (s, body) = api
        .patch(
            "/api/v1/nodes/n1/status",
            "application/merge-patch+json",
            json!({"status": {"allocatable": {"cpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (_, read) = api.call("GET", "/api/v1/nodes/n1", None).await;
    assert_eq!(read["status"]["allocatable"]["cpu"], "4");

    // Metadata only, as `as=PartialObjectMetadataList` asks.
    let accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let (s, text) = api
        .send(
            "GET",
            "/api/v1/namespaces",
            None,
            Body::empty(),
            &[("accept", accept)],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list["items"][0]["metadata"]["name"], "apps");
    assert!(list["items"][0].get("status").is_none());
    let accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let (_, text) = api
        .send(
            "GET",
            "/api/v1/nodes/n1",
            None,
            Body::empty(),
            &[("accept", accept)],
        )
        .await;
    let one: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(one["metadata"]["name"], "n1");
    assert!(one.get("status").is_none());
}
