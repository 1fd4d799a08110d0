//! propagateDeps end to end with the real binaries: a Deployment whose pod template uses a
//! ConfigMap, placed by a policy with `propagateDeps: true` on two simulated members, takes the
//! ConfigMap with it — through the attached binding `cfg-configmap` and its `requiredBy` — and
//! a Secret it names that is created later; the ConfigMap's changes reach the members, it
//! follows the Deployment when the policy narrows, and goes when the Deployment is deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{eventually, member_call, wait_members_ready, ApiClient, Server};
use serde_json::{json, Value};
use std::time::Duration;

const RBS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";
const CM: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const PP: &str = "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies";
const WAIT: Duration = Duration::from_secs(60);

fn create(api: &ApiClient, path: &str, body: Value) {
    let (code, resp) = api.send("POST", path, Some(&body)).unwrap();
    assert_eq!(code, 201, "POST {path}: {resp}");
}

fn patch(api: &ApiClient, path: &str, body: Value) {
    let (code, resp) = api.send("PATCH", path, Some(&body)).unwrap();
    assert_eq!(code, 200, "PATCH {path}: {resp}");
}

/// The ConfigMap `cfg` on a simulated member (`None` when it is not there).
fn member_cm(members: &str, member: &str) -> Option<Value> {
    member_object(members, member, "ConfigMap", "cfg")
}

fn member_object(members: &str, member: &str, kind: &str, name: &str) -> Option<Value> {
    let url = format!(
        "{members}/members/{member}/objects?apiVersion=v1&kind={kind}&namespace=default&name={name}"
    );
    match member_call("GET", &url, None) {
        Ok((200, v)) => Some(v),
        _ => None,
    }
}

/// Whether the member answers and says `cfg` is not there.
fn member_cm_absent(members: &str, member: &str) -> bool {
    let url =
        format!("{members}/members/{member}/objects?apiVersion=v1&kind=ConfigMap&namespace=default&name=cfg");
    matches!(member_call("GET", &url, None), Ok((404, _)))
}

/// (binding name, sorted clusters) of each requiredBy snapshot.
fn required_by(binding: &Value) -> Vec<(String, Vec<String>)> {
    binding["spec"]["requiredBy"]
        .as_array()
        .map(|snaps| {
            snaps
                .iter()
                .map(|s| {
                    let mut clusters: Vec<String> = s["clusters"]
                        .as_array()
                        .map(|cs| {
                            cs.iter()
                                .filter_map(|c| c["name"].as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    clusters.sort();
                    (s["name"].as_str().unwrap_or("").to_string(), clusters)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn configmap_work(api: &ApiClient, cluster: &str) -> Option<Value> {
    let works = api
        .get(&format!(
            "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{cluster}/works"
        ))
        .ok()?;
    works["items"].as_array()?.iter().find_map(|w| {
        let m = &w["spec"]["workload"]["manifests"][0];
        (m["kind"] == "ConfigMap" && m["metadata"]["name"] == "cfg").then(|| w.clone())
    })
}

#[test]
fn a_configmap_follows_the_deployment_that_uses_it() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &["--sim-members", "2", "--sim-pod-startup-delay-ms", "100"],
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    wait_members_ready(&api, 2);
    let members = server.sim_members_url();

    create(
        &api,
        CM,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "namespace": "default"}, "data": {"greeting": "hello"}}),
    );
    create(
        &api,
        DEPLOYMENTS,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx",
                                                           "envFrom": [{"configMapRef": {"name": "cfg"}}],
                                                           "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}],
                                                           "volumeMounts": [{"name": "conf", "mountPath": "/etc/web"}]}],
                                           "volumes": [{"name": "conf", "configMap": {"name": "cfg"}}]}}}}),
    );
    create(
        &api,
        PP,
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"propagateDeps": true,
                     "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                     "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]},
                                   "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}}}),
    );

    let both = vec!["member1".to_string(), "member2".to_string()];
    let attached = eventually(
        "the attached binding cfg-configmap required by web-deployment on both members",
        WAIT,
        || {
            let b = api.get(&format!("{RBS}/cfg-configmap")).ok()?;
            (required_by(&b) == [("web-deployment".to_string(), both.clone())]).then_some(b)
        },
    );
    assert_eq!(attached["spec"]["resource"]["kind"], "ConfigMap");
    assert_eq!(
        attached["metadata"]["ownerReferences"][0]["kind"],
        "ConfigMap"
    );
    assert!(
        attached.pointer("/spec/placement").is_none(),
        "attached bindings are not placed by a policy: {attached}"
    );
    let labels = attached["metadata"]["labels"].as_object().unwrap();
    assert!(
        labels
            .keys()
            .any(|k| k.starts_with("resourcebinding.karmada.io/depended-by-")),
        "{attached}"
    );
    for cluster in ["member1", "member2"] {
        eventually(
            &format!("a Work for the ConfigMap in karmada-es-{cluster}"),
            WAIT,
            || configmap_work(&api, cluster),
        );
        let cm = eventually(&format!("the ConfigMap on {cluster}"), WAIT, || {
            member_cm(&members, cluster)
        });
        assert_eq!(cm["data"]["greeting"], "hello", "{cm}");
    }

    // A dependency created after the workload is picked up when it appears.
    create(
        &api,
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "token", "namespace": "default"}, "data": {"t": "czNjcjN0"}}),
    );
    for cluster in ["member1", "member2"] {
        eventually(
            &format!("the Secret created later on {cluster}"),
            WAIT,
            || member_object(&members, cluster, "Secret", "token"),
        );
    }

    // A change of the ConfigMap reaches the members.
    patch(
        &api,
        &format!("{CM}/cfg"),
        json!({"data": {"greeting": "hi"}}),
    );
    for cluster in ["member1", "member2"] {
        eventually(&format!("the changed ConfigMap on {cluster}"), WAIT, || {
            member_cm(&members, cluster).filter(|cm| cm["data"]["greeting"] == "hi")
        });
    }

    // The attached binding reports the members' status like any binding.
    eventually("the attached binding applied on both members", WAIT, || {
        let b = api.get(&format!("{RBS}/cfg-configmap")).ok()?;
        let items = b["status"]["aggregatedStatus"].as_array()?;
        (items.len() == 2 && items.iter().all(|i| i["applied"] == true)).then_some(())
    });

    // The policy narrows to member1: the ConfigMap leaves member2.
    patch(
        &api,
        &format!("{PP}/web"),
        json!({"spec": {"placement": {"clusterAffinity": {"clusterNames": ["member1"]}}}}),
    );
    eventually("requiredBy names member1 only", WAIT, || {
        let b = api.get(&format!("{RBS}/cfg-configmap")).ok()?;
        (required_by(&b) == [("web-deployment".to_string(), vec!["member1".to_string()])])
            .then_some(())
    });
    eventually("the ConfigMap gone from member2", WAIT, || {
        member_cm_absent(&members, "member2").then_some(())
    });
    assert!(member_cm(&members, "member1").is_some(), "still on member1");
    assert!(configmap_work(&api, "member2").is_none());

    // The Deployment goes: so do its binding, the attached binding and the member copy.
    let (code, body) = api
        .send("DELETE", &format!("{DEPLOYMENTS}/web"), None)
        .unwrap();
    assert!(code == 200 || code == 202, "{code} {body}");
    eventually("the attached binding deleted", WAIT, || {
        matches!(
            api.send("GET", &format!("{RBS}/cfg-configmap"), None),
            Ok((404, _))
        )
        .then_some(())
    });
    eventually("the ConfigMap gone from member1", WAIT, || {
        member_cm_absent(&members, "member1").then_some(())
    });
    // The ConfigMap itself stays in the control plane.
    api.get(&format!("{CM}/cfg")).unwrap();
}
