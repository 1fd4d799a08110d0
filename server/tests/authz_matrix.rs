//! The authorization matrix through the router: every credential kind (admin token, member
//! credential, join token, no token, a garbage token) × verb (get, list, watch, create,
//! update, each patch type, apply to a missing object, delete, deletecollection, the status
//! subresource) × resource (own and other Cluster, Lease and Works; Events, Secrets,
//! Deployments, policies, bindings; /metrics and the register endpoint), with the expected
//! answer. A refusal must leave the store as it was. Then the life cycle of a credential:
//! re-registration needs an admin's annotation, a deleted Cluster's credential stops at once,
//! and a restarted server does not load it again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{assert_status, TestApi, JOIN_TOKEN, TOKEN};
use flotilla_api::kinds::{builtin_by_plural, well_known, ResourceType};
use flotilla_server::store::ListOptions;
use serde_json::{json, Value};
use tower::ServiceExt;

const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases";
const WORKS_M1: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works";
const WORKS_M2: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m2/works";
const EVENTS_M1: &str = "/api/v1/namespaces/karmada-es-m1/events";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const POLICIES: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const BINDINGS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const ALLOW: &str = "flotilla.io/allow-reregistration";
const FINALIZER: &str = "karmada.io/execution-controller";

/// Who calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cred {
    Admin,
    /// The credential of member m1.
    Member,
    Join,
    NoToken,
    Garbage,
}

const CREDS: [Cred; 5] = [
    Cred::Admin,
    Cred::Member,
    Cred::Join,
    Cred::NoToken,
    Cred::Garbage,
];

/// What is called, in the order of the expectation rows below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    PatchMerge,
    PatchJson,
    PatchStrategic,
    PatchApply,
    /// A server-side apply to an object that does not exist (which would create it).
    ApplyCreate,
    /// A merge patch that only removes the finalizers (what an agent does to its Works).
    RemoveFinalizers,
    Delete,
    DeleteCollection,
    GetStatus,
    UpdateStatus,
    PatchStatus,
}

const VERBS: [Verb; 16] = [
    Verb::Get,
    Verb::List,
    Verb::Watch,
    Verb::Create,
    Verb::Update,
    Verb::PatchMerge,
    Verb::PatchJson,
    Verb::PatchStrategic,
    Verb::PatchApply,
    Verb::ApplyCreate,
    Verb::RemoveFinalizers,
    Verb::Delete,
    Verb::DeleteCollection,
    Verb::GetStatus,
    Verb::UpdateStatus,
    Verb::PatchStatus,
];

/// One resource of the matrix: its collection, the fixture object, the name a create uses
/// (the fixture's own name for Leases, whose name is what the check is about: the fixture is
/// deleted first then), and the expected codes for the admin and for member m1, one per verb
/// in [`VERBS`] order. The join token, no token and a garbage token get 401 everywhere.
struct Row {
    what: &'static str,
    collection: &'static str,
    name: &'static str,
    create_name: &'static str,
    object: fn(&str) -> Value,
    admin: [u16; 16],
    member: [u16; 16],
}

//                       get  list watch crt  upd  mrg  json smp  apl  aplC fin  del  delC sGet sPut sPat
const ADMIN_STATUS: [u16; 16] = [
    200, 200, 200, 201, 200, 200, 200, 200, 200, 201, 200, 200, 200, 200, 200, 200,
];
const ADMIN_NO_STATUS: [u16; 16] = [
    200, 200, 200, 201, 200, 200, 200, 200, 200, 201, 200, 200, 200, 404, 404, 404,
];
const FORBIDDEN: [u16; 16] = [403; 16];

fn rows() -> Vec<Row> {
    vec![
        Row {
            what: "own Cluster",
            collection: CLUSTERS,
            name: "m1",
            create_name: "created",
            object: cluster,
            admin: ADMIN_STATUS,
            //       get  list watch crt  upd  mrg  json smp  apl  aplC fin  del  delC sGet sPut sPat
            member: [
                200, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 200, 200, 200,
            ],
        },
        Row {
            what: "other Cluster",
            collection: CLUSTERS,
            name: "m2",
            create_name: "created",
            object: cluster,
            admin: ADMIN_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "own Lease",
            collection: LEASES,
            name: "m1",
            create_name: "m1",
            object: lease,
            admin: ADMIN_NO_STATUS,
            //       get  list watch crt  upd  mrg  json smp  apl  aplC fin  del  delC sGet sPut sPat
            member: [
                200, 403, 403, 201, 200, 200, 200, 200, 200, 403, 200, 403, 403, 403, 403, 403,
            ],
        },
        Row {
            what: "other Lease",
            collection: LEASES,
            name: "m2",
            create_name: "m2",
            object: lease,
            admin: ADMIN_NO_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "Works in its namespace",
            collection: WORKS_M1,
            name: "w",
            create_name: "created",
            object: |n| work(n, "karmada-es-m1"),
            admin: ADMIN_STATUS,
            //       get  list watch crt  upd  mrg  json smp  apl  aplC fin  del  delC sGet sPut sPat
            member: [
                200, 200, 200, 403, 403, 403, 403, 403, 403, 403, 200, 403, 403, 200, 200, 200,
            ],
        },
        Row {
            what: "Works in another namespace",
            collection: WORKS_M2,
            name: "w",
            create_name: "created",
            object: |n| work(n, "karmada-es-m2"),
            admin: ADMIN_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "Events in its namespace",
            collection: EVENTS_M1,
            name: "e",
            create_name: "created",
            object: event,
            admin: ADMIN_NO_STATUS,
            //       get  list watch crt  upd  mrg  json smp  apl  aplC fin  del  delC sGet sPut sPat
            member: [
                403, 403, 403, 201, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403,
            ],
        },
        Row {
            what: "Secrets",
            collection: SECRETS,
            name: "s",
            create_name: "created",
            object: secret,
            admin: ADMIN_NO_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "Deployments",
            collection: DEPLOYMENTS,
            name: "d",
            create_name: "created",
            object: deployment,
            admin: ADMIN_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "PropagationPolicies",
            collection: POLICIES,
            name: "p",
            create_name: "created",
            object: policy,
            admin: ADMIN_NO_STATUS,
            member: FORBIDDEN,
        },
        Row {
            what: "ResourceBindings",
            collection: BINDINGS,
            name: "b",
            create_name: "created",
            object: binding,
            admin: ADMIN_STATUS,
            member: FORBIDDEN,
        },
    ]
}

fn cluster(name: &str) -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name}, "spec": {"syncMode": "Pull"}})
}

fn lease(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": "karmada-cluster"},
           "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}})
}

fn work(name: &str, namespace: &str) -> Value {
    json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
           "metadata": {"name": name, "namespace": namespace, "finalizers": [FINALIZER]},
           "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default"}}]}}})
}

fn event(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event",
           "metadata": {"name": name, "namespace": "karmada-es-m1"},
           "involvedObject": {"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
                              "name": "w", "namespace": "karmada-es-m1"},
           "reason": "Applied", "message": "applied", "type": "Normal"})
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": "default"},
           "type": "Opaque", "stringData": {"k": "v"}})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn policy(name: &str) -> Value {
    json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}],
                    "placement": {"clusterAffinity": {"clusterNames": ["m1"]}}}})
}

fn binding(name: &str) -> Value {
    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "namespace": "default", "name": "d"}}})
}

/// A server with members m1 and m2 registered and one object of every row.
struct World {
    api: TestApi,
    /// m1's credential.
    member: String,
}

impl World {
    async fn new() -> Self {
        let api = TestApi::new().await;
        let member = register(&api, "m1").await;
        register(&api, "m2").await;
        for row in rows() {
            if row.collection == CLUSTERS {
                continue;
            }
            let (s, body) = api
                .call("POST", row.collection, Some((row.object)(row.name)))
                .await;
            assert_eq!(s, StatusCode::CREATED, "fixture of {}: {body}", row.what);
        }
        World { api, member }
    }

    fn token(&self, cred: Cred) -> Option<&str> {
        match cred {
            Cred::Admin => Some(TOKEN),
            Cred::Member => Some(&self.member),
            Cred::Join => Some(JOIN_TOKEN),
            Cred::NoToken => None,
            Cred::Garbage => Some("not-a-token"),
        }
    }

    /// Sends a request; the body of a successful watch is not read (it does not end).
    async fn send(
        &self,
        cred: Cred,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = self.token(cred) {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let resp = self
            .api
            .router
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        if status.is_success() && path.contains("watch=true") {
            return (status, Value::Null);
        }
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).to_string();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Every object of every kind the matrix touches, as stored.
    async fn snapshot(&self) -> Vec<Value> {
        let kinds: Vec<ResourceType> = vec![
            well_known::clusters(),
            well_known::leases(),
            well_known::works(),
            well_known::events(),
            well_known::propagation_policies(),
            well_known::resource_bindings(),
            builtin_by_plural("", "secrets").unwrap(),
            builtin_by_plural("apps", "deployments").unwrap(),
        ];
        let mut all = Vec::new();
        for rt in kinds {
            let page = self
                .api
                .store
                .list(&rt, None, &ListOptions::default())
                .await
                .unwrap();
            all.extend(page.items);
        }
        all
    }
}

/// Registers `name` with the join token; answers its credential.
async fn register(api: &TestApi, name: &str) -> String {
    let (s, v) = register_as(api, JOIN_TOKEN, name).await;
    assert_eq!(s, StatusCode::OK, "registering {name}: {v}");
    v["token"].as_str().unwrap().to_string()
}

async fn register_as(api: &TestApi, token: &str, name: &str) -> (StatusCode, Value) {
    let (s, text) = api
        .send_as(
            token,
            "POST",
            "/flotilla/v1/register",
            Some("application/json"),
            json!({"clusterName": name, "labels": {"from": "agent"}}).to_string(),
            &[],
        )
        .await;
    (s, serde_json::from_str(&text).unwrap())
}

/// Runs one verb of one row as `cred`; answers the status and body.
async fn run(world: &World, cred: Cred, row: &Row, verb: Verb) -> (StatusCode, Value) {
    let item = format!("{}/{}", row.collection, row.name);
    let created = format!("{}/{}", row.collection, row.create_name);
    let labelled = json!({"metadata": {"labels": {"touched": "yes"}}});
    let conditions = json!([{"type": "Ready", "status": "True", "reason": "Test",
                             "message": "set by the matrix", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    let merge = Some("application/merge-patch+json");
    let (_, live) = world.api.call("GET", &item, None).await;
    match verb {
        Verb::Get => world.send(cred, "GET", &item, None, None).await,
        Verb::List => world.send(cred, "GET", row.collection, None, None).await,
        Verb::Watch => {
            let path = format!("{}?watch=true", row.collection);
            world.send(cred, "GET", &path, None, None).await
        }
        Verb::Create => {
            let body = (row.object)(row.create_name);
            world
                .send(
                    cred,
                    "POST",
                    row.collection,
                    Some("application/json"),
                    Some(&body),
                )
                .await
        }
        Verb::Update => {
            let mut body = live;
            body["metadata"]["labels"]["touched"] = json!("yes");
            world
                .send(cred, "PUT", &item, Some("application/json"), Some(&body))
                .await
        }
        Verb::PatchMerge => {
            world
                .send(cred, "PATCH", &item, merge, Some(&labelled))
                .await
        }
        Verb::PatchJson => {
            let ops = json!([{"op": "add", "path": "/metadata/annotations", "value": {"touched": "yes"}}]);
            world
                .send(
                    cred,
                    "PATCH",
                    &item,
                    Some("application/json-patch+json"),
                    Some(&ops),
                )
                .await
        }
        Verb::PatchStrategic => {
            let ct = Some("application/strategic-merge-patch+json");
            world.send(cred, "PATCH", &item, ct, Some(&labelled)).await
        }
        Verb::PatchApply | Verb::ApplyCreate => {
            let (path, name) = if verb == Verb::PatchApply {
                (&item, row.name)
            } else {
                (&created, row.create_name)
            };
            // A partial configuration for the existing object, a whole one for the missing.
            let mut body = (row.object)(name);
            if verb == Verb::PatchApply {
                body = json!({"apiVersion": body["apiVersion"], "kind": body["kind"],
                              "metadata": {"name": name}});
            }
            body["metadata"]["labels"] = json!({"touched": "yes"});
            let ct = Some("application/apply-patch+yaml");
            world.send(cred, "PATCH", path, ct, Some(&body)).await
        }
        Verb::RemoveFinalizers => {
            let body = json!({"metadata": {"finalizers": null}});
            world.send(cred, "PATCH", &item, merge, Some(&body)).await
        }
        Verb::Delete => world.send(cred, "DELETE", &item, None, None).await,
        Verb::DeleteCollection => world.send(cred, "DELETE", row.collection, None, None).await,
        Verb::GetStatus => {
            world
                .send(cred, "GET", &format!("{item}/status"), None, None)
                .await
        }
        Verb::UpdateStatus => {
            let mut body = live;
            body["status"] = json!({"conditions": conditions});
            let path = format!("{item}/status");
            world
                .send(cred, "PUT", &path, Some("application/json"), Some(&body))
                .await
        }
        Verb::PatchStatus => {
            let body = json!({"status": {"conditions": conditions}});
            let path = format!("{item}/status");
            world.send(cred, "PATCH", &path, merge, Some(&body)).await
        }
    }
}

fn expected(row: &Row, cred: Cred, i: usize) -> u16 {
    match cred {
        Cred::Admin => row.admin[i],
        Cred::Member => row.member[i],
        Cred::Join | Cred::NoToken | Cred::Garbage => 401,
    }
}

#[tokio::test]
async fn every_credential_verb_and_resource_gets_its_answer() {
    let mut mismatches = Vec::new();
    // A call expected to succeed gets a fresh world; the refusals share one, which each of
    // them must leave as it was.
    let shared = World::new().await;
    for row in rows() {
        for (i, verb) in VERBS.into_iter().enumerate() {
            for cred in CREDS {
                let want = expected(&row, cred, i);
                let fresh;
                let world = if (200..300).contains(&want) {
                    fresh = World::new().await;
                    &fresh
                } else {
                    &shared
                };
                if matches!(verb, Verb::Create | Verb::ApplyCreate) && row.create_name == row.name {
                    let item = format!("{}/{}", row.collection, row.name);
                    // (The shared world may have lost it to an earlier set-up.)
                    let (s, _) = world.api.call("DELETE", &item, None).await;
                    assert!(
                        matches!(s, StatusCode::OK | StatusCode::NOT_FOUND),
                        "set-up of {} {verb:?}: {s}",
                        row.what
                    );
                }
                let before = world.snapshot().await;
                let (got, body) = run(world, cred, &row, verb).await;
                if got.as_u16() != want {
                    mismatches.push(format!(
                        "{} {verb:?} as {cred:?}: want {want}, got {got}: {body}",
                        row.what
                    ));
                    continue;
                }
                if !got.is_success() {
                    let reason = match want {
                        401 => "Unauthorized",
                        403 => "Forbidden",
                        _ => "NotFound",
                    };
                    assert_status(&body, want, reason);
                    assert_eq!(
                        world.snapshot().await,
                        before,
                        "{} {verb:?} as {cred:?} was refused but changed the store",
                        row.what
                    );
                }
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn metrics_and_the_register_endpoint_per_credential() {
    let world = World::new().await;
    // (credential, GET /metrics, POST /flotilla/v1/register of a new name)
    let table = [
        (Cred::Admin, 200, 401),
        (Cred::Member, 403, 401),
        (Cred::Join, 401, 200),
        (Cred::NoToken, 401, 401),
        (Cred::Garbage, 401, 401),
    ];
    for (cred, metrics, register) in table {
        let (s, _) = world.send(cred, "GET", "/metrics", None, None).await;
        assert_eq!(s.as_u16(), metrics, "GET /metrics as {cred:?}");
        let name = format!("new-{}", format!("{cred:?}").to_lowercase());
        let before = world.snapshot().await;
        let body = json!({"clusterName": name});
        let ct = Some("application/json");
        let (s, v) = world
            .send(cred, "POST", "/flotilla/v1/register", ct, Some(&body))
            .await;
        assert_eq!(s.as_u16(), register, "register as {cred:?}: {v}");
        let (exists, _) = world
            .api
            .call("GET", &format!("{CLUSTERS}/{name}"), None)
            .await;
        if register == 200 {
            assert_eq!(exists, StatusCode::OK);
        } else {
            assert_status(&v, 401, "Unauthorized");
            assert_eq!(exists, StatusCode::NOT_FOUND, "{cred:?}");
            assert_eq!(world.snapshot().await, before, "{cred:?}");
        }
    }
}

#[tokio::test]
async fn the_join_token_registers_an_existing_cluster_only_once_an_admin_allows_it() {
    let world = World::new().await;
    let api = &world.api;
    let m1 = format!("{CLUSTERS}/m1");
    // An admin-made pull Cluster without any credential.
    let (s, _) = api.call("POST", CLUSTERS, Some(cluster("adminmade"))).await;
    assert_eq!(s, StatusCode::CREATED);
    for name in ["m1", "adminmade"] {
        let before = world.snapshot().await;
        let (s, v) = register_as(api, JOIN_TOKEN, name).await;
        assert_eq!(s, StatusCode::CONFLICT, "{name}: {v}");
        assert_status(&v, 409, "Conflict");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.contains(ALLOW),
            "the message says what to do: {message}"
        );
        assert_eq!(world.snapshot().await, before, "{name}");
    }
    // The running agent keeps working.
    let (s, _) = world.send(Cred::Member, "GET", &m1, None, None).await;
    assert_eq!(s, StatusCode::OK);

    // An annotation that is not "true" allows nothing.
    let annotate = |value: &str| json!({"metadata": {"annotations": {ALLOW: value}}});
    let (s, _) = api
        .patch(&m1, "application/merge-patch+json", annotate("yes"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        register_as(api, JOIN_TOKEN, "m1").await.0,
        StatusCode::CONFLICT
    );

    // Allowed once: the new credential works, the old one is revoked, the annotation is gone.
    api.patch(&m1, "application/merge-patch+json", annotate("true"))
        .await;
    let fresh = register(api, "m1").await;
    let (s, _) = world.send(Cred::Member, "GET", &m1, None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "the former credential");
    let (s, text) = api
        .send_as(&fresh, "GET", &m1, None, Body::empty(), &[])
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (_, stored) = api.call("GET", &m1, None).await;
    assert!(
        stored["metadata"]["annotations"][ALLOW].is_null(),
        "{stored}"
    );
    assert_eq!(stored["metadata"]["labels"]["from"], "agent");
    assert_eq!(
        register_as(api, JOIN_TOKEN, "m1").await.0,
        StatusCode::CONFLICT,
        "the annotation was consumed"
    );

    // An admin-made cluster can be handed to an agent the same way; a Push one never.
    api.patch(
        &format!("{CLUSTERS}/adminmade"),
        "application/merge-patch+json",
        annotate("true"),
    )
    .await;
    register(api, "adminmade").await;
    let mut push = cluster("pushed");
    push["spec"] = json!({"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1"});
    push["metadata"]["annotations"] = json!({ALLOW: "true"});
    assert_eq!(
        api.call("POST", CLUSTERS, Some(push)).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        register_as(api, JOIN_TOKEN, "pushed").await.0,
        StatusCode::CONFLICT
    );
}

#[tokio::test]
async fn a_deleted_cluster_revokes_its_credential_at_once() {
    let world = World::new().await;
    let api = &world.api;
    let m1 = format!("{CLUSTERS}/m1");
    let secret = "/api/v1/namespaces/karmada-cluster/secrets/flotilla-agent-m1";
    assert_eq!(api.call("GET", secret, None).await.0, StatusCode::OK);
    let (s, _) = api.call("DELETE", &m1, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(api.call("GET", secret, None).await.0, StatusCode::NOT_FOUND);
    // Nothing works any more, least of all re-creating the Cluster with another spec.
    let mut push = cluster("m1");
    push["spec"] = json!({"syncMode": "Push", "apiEndpoint": "http://127.0.0.1:1"});
    let ct = Some("application/json");
    let attempts = [
        ("GET", m1.clone(), None, None),
        ("POST", CLUSTERS.to_string(), ct, Some(push.clone())),
        ("PUT", m1.clone(), ct, Some(push.clone())),
        (
            "PATCH",
            m1.clone(),
            Some("application/apply-patch+yaml"),
            Some(push.clone()),
        ),
        (
            "PATCH",
            format!("{m1}/status"),
            Some("application/apply-patch+yaml"),
            Some(push),
        ),
        ("GET", WORKS_M1.to_string(), None, None),
    ];
    for (method, path, ct, body) in attempts {
        let (s, v) = world
            .send(Cred::Member, method, &path, ct, body.as_ref())
            .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {v}");
    }
    assert_eq!(api.call("GET", &m1, None).await.0, StatusCode::NOT_FOUND);

    // A Cluster held by a finalizer: the credential goes when the deletion is asked for.
    let m2 = format!("{CLUSTERS}/m2");
    let fresh = {
        api.patch(
            &m2,
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.io/hold"], "annotations": {ALLOW: "true"}}}),
        )
        .await;
        register(api, "m2").await
    };
    assert_eq!(api.call("DELETE", &m2, None).await.0, StatusCode::OK);
    let (s, _) = api
        .send_as(&fresh, "GET", &m2, None, Body::empty(), &[])
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(
        register_as(api, JOIN_TOKEN, "m2").await.0,
        StatusCode::CONFLICT,
        "a Cluster being deleted is not registered again"
    );

    // Deleting the credential Secret revokes it too.
    let m3 = register(api, "m3").await;
    let path = "/api/v1/namespaces/karmada-cluster/secrets/flotilla-agent-m3";
    assert_eq!(api.call("DELETE", path, None).await.0, StatusCode::OK);
    let (s, _) = api
        .send_as(
            &m3,
            "GET",
            &format!("{CLUSTERS}/m3"),
            None,
            Body::empty(),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// A server over `store` as `app::start` builds it: stored credentials loaded.
async fn restarted(store: std::sync::Arc<dyn flotilla_server::store::Store>) -> TestApi {
    use flotilla_server::app;
    let config = app::ServerConfig::new("/nonexistent");
    let (registry, crd_feed) = flotilla_server::kinds::CrdFeed::start(store.clone())
        .await
        .unwrap();
    let state = app::api_state(
        &config,
        store.clone(),
        registry,
        (TOKEN, JOIN_TOKEN),
        std::sync::Arc::new(flotilla_support::clock::SystemClock),
        tokio::sync::watch::channel(false).1,
    )
    .unwrap();
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    flotilla_server::api::access::registration::load_credentials(&state)
        .await
        .unwrap();
    TestApi {
        router: flotilla_server::api::router(state),
        store,
        crd_feed,
    }
}

#[tokio::test]
async fn a_restarted_server_loads_no_credential_of_a_cluster_that_is_gone() {
    let world = World::new().await;
    // A crash between the Cluster's deletion and its Secret's: the Secret is left behind.
    world
        .api
        .store
        .delete(
            &well_known::clusters(),
            None,
            "m1",
            &flotilla_server::store::DeleteOptions::default(),
        )
        .await
        .unwrap();
    let m2 = register_as(&world.api, JOIN_TOKEN, "m2-too").await.1["token"]
        .as_str()
        .unwrap()
        .to_string();
    let api = restarted(world.api.store.clone()).await;
    let get = |token: String, path: String| {
        let api = &api;
        async move {
            api.send_as(&token, "GET", &path, None, Body::empty(), &[])
                .await
                .0
        }
    };
    assert_eq!(
        get(world.member.clone(), format!("{CLUSTERS}/m1")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(m2, format!("{CLUSTERS}/m2-too")).await,
        StatusCode::OK,
        "a live member's credential survives the restart"
    );
    let secret = "/api/v1/namespaces/karmada-cluster/secrets/flotilla-agent-m1";
    assert_eq!(api.call("GET", secret, None).await.0, StatusCode::NOT_FOUND);
}
