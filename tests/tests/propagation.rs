//! Propagation end to end with the real binaries: a template plus a policy become a binding,
//! the scheduler places it as the scenario says, Works reach the simulated pull members, their
//! status flows back as Healthy, and the Deployment's status shows the summed ready replicas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    eventually, post_manifests, scenario_text, wait_members_ready, ApiClient, Server,
};
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/default/deployments/nginx";

fn placement(api: &ApiClient) -> Option<Vec<(String, i64)>> {
    let rb = api.get(RB).ok()?;
    let mut out: Vec<(String, i64)> = rb["spec"]["clusters"]
        .as_array()?
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["replicas"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    Some(out)
}

/// A server with `members` simulated members, once they are all Ready.
fn server_with_members(data: &std::path::Path, members: usize) -> (Server, ApiClient) {
    let n = members.to_string();
    let server = Server::start(
        data,
        &["--sim-members", &n, "--sim-pod-startup-delay-ms", "200"],
    )
    .unwrap();
    let api = ApiClient::admin(&server).unwrap();
    wait_members_ready(&api, members);
    (server, api)
}

/// The URL of a simulated member's own surface.
fn member_url(server: &Server, member: &str) -> String {
    format!("{}/members/{member}", server.sim_members_url())
}

/// The `spec.replicas` of the nginx Deployment as the member runs it, if it runs there.
fn replicas_on_member(server: &Server, member: &str) -> Option<i64> {
    let url = format!(
        "{}/objects?apiVersion=apps/v1&kind=Deployment&namespace=default&name=nginx",
        member_url(server, member)
    );
    match flotilla_tests::member_call("GET", &url, None).ok()? {
        (200, d) => d["spec"]["replicas"].as_i64(),
        _ => None,
    }
}

fn scale(api: &ApiClient, replicas: i64) {
    let (code, body) = api
        .send(
            "PATCH",
            DEPLOYMENT,
            Some(&serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .unwrap();
    assert_eq!(code, 200, "{body}");
}

/// Waits until `n` members report the binding's work applied and Healthy.
fn wait_healthy(api: &ApiClient, n: usize) {
    eventually("aggregatedStatus Healthy", Duration::from_secs(60), || {
        let rb = api.get(RB);
        let healthy = rb
            .as_ref()
            .ok()
            .and_then(|rb| rb["status"]["aggregatedStatus"].as_array())
            .is_some_and(|items| {
                items.len() == n
                    && items
                        .iter()
                        .all(|i| i["applied"] == true && i["health"] == "Healthy")
            });
        if healthy {
            Ok(())
        } else {
            Err(format!("binding {rb:?}"))
        }
    });
}

/// Waits until the Deployment's status shows `n` ready replicas summed over the members.
fn wait_ready_replicas(api: &ApiClient, n: i64) {
    eventually(
        &format!("the Deployment's status shows {n} ready replicas"),
        Duration::from_secs(60),
        || {
            let d = api.get(DEPLOYMENT).ok()?;
            (d["status"]["readyReplicas"] == n).then_some(())
        },
    );
}

/// Waits until the binding's placement and the members' copies both equal `want`.
fn wait_placed(server: &Server, api: &ApiClient, what: &str, want: &[(&str, i64)]) {
    let want: Vec<(String, i64)> = want.iter().map(|(c, r)| (c.to_string(), *r)).collect();
    eventually(what, Duration::from_secs(60), || {
        if placement(api).as_ref() == Some(&want) {
            Ok(())
        } else {
            Err(format!("binding {:?}", api.get(RB)))
        }
    });
    for (cluster, replicas) in &want {
        eventually(
            &format!("{what}: {cluster} runs {replicas} replicas"),
            Duration::from_secs(60),
            || (replicas_on_member(server, cluster) == Some(*replicas)).then_some(()),
        );
    }
}

#[test]
fn scenario_01_duplicated_on_exactly_two_allowed_members() {
    let data = tempfile::tempdir().unwrap();
    let (server, api) = server_with_members(data.path(), 5);
    post_manifests(&api, &scenario_text("01-duplicated-failover.yaml"));
    let placed = eventually(
        "the binding placed on two clusters",
        Duration::from_secs(60),
        || placement(&api).filter(|p| p.len() == 2),
    );
    let allowed = ["member1", "member2", "member3", "member5"];
    for (cluster, replicas) in &placed {
        assert!(allowed.contains(&cluster.as_str()), "{placed:?}");
        assert_eq!(
            *replicas, 2,
            "Duplicated: the full count on each: {placed:?}"
        );
        eventually(
            &format!("the Deployment on {cluster}"),
            Duration::from_secs(60),
            || replicas_on_member(&server, cluster),
        );
    }
    wait_healthy(&api, 2);
    wait_ready_replicas(&api, 4);
    // Scaling keeps the two clusters (ClusterLocality) and gives each the new full count.
    scale(&api, 3);
    let want: Vec<(&str, i64)> = placed.iter().map(|(c, _)| (c.as_str(), 3)).collect();
    wait_placed(&server, &api, "scaled to 3 on the same two clusters", &want);
    // member4 never received anything.
    let works4 = api
        .get("/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member4/works")
        .unwrap();
    assert_eq!(works4["items"].as_array().unwrap().len(), 0, "{works4}");
    assert_eq!(replicas_on_member(&server, "member4"), None);
    let why = api.get(&format!("{RB}/explain")).unwrap();
    let member4 = why["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "member4")
        .unwrap_or_else(|| panic!("{why:#}"));
    assert_eq!(member4["filter"], "ClusterAffinity", "{why:#}");
}

#[test]
fn scenario_02_divided_by_weight_runs_healthy_on_members() {
    let data = tempfile::tempdir().unwrap();
    let (server, api) = server_with_members(data.path(), 3);
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));

    wait_placed(
        &server,
        &api,
        "the binding placed 1/2 on member1/member2",
        &[("member1", 1), ("member2", 2)],
    );
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    for (cluster, replicas) in &want {
        let works = api
            .get(&format!(
                "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{cluster}/works"
            ))
            .unwrap();
        let items = works["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{cluster}: {works}");
        assert_eq!(
            items[0]["spec"]["workload"]["manifests"][0]["spec"]["replicas"],
            *replicas
        );
    }
    let works3 = api
        .get("/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member3/works")
        .unwrap();
    assert_eq!(
        works3["items"].as_array().unwrap().len(),
        0,
        "member3 is not in the affinity"
    );

    wait_healthy(&api, 2);
    wait_ready_replicas(&api, 3);
    let rb = api.get(RB).unwrap();
    let scheduled = rb["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Scheduled")
        .unwrap();
    assert_eq!(scheduled["status"], "True");
    // Why: member3 is filtered by the affinity, member1/member2 carry the 1:2 weights.
    let why = api.get(&format!("{RB}/explain")).unwrap();
    assert_eq!(why["result"]["reason"], "Success", "{why:#}");
    let clusters = why["clusters"].as_array().unwrap();
    let member = |n: &str| {
        clusters
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {why:#}"))
    };
    assert_eq!(member("member1")["replicas"], 1);
    assert_eq!(member("member2")["replicas"], 2);
    assert_eq!(member("member3")["selected"], false);
    assert_eq!(member("member3")["filter"], "ClusterAffinity", "{why:#}");
    assert!(!why["arithmetic"].as_array().unwrap().is_empty());
    let fully = rb["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "FullyApplied")
        .unwrap_or_else(|| panic!("{rb:#}"));
    assert_eq!(fully["status"], "True");

    // Scaling rebalances by the static weights, recomputed from scratch (1:2 of 6, then of 4).
    scale(&api, 6);
    wait_placed(
        &server,
        &api,
        "scaled up to 6",
        &[("member1", 2), ("member2", 4)],
    );
    wait_ready_replicas(&api, 6);
    // Webster over 1:2 for 4 seats: member2, member1, member2, member2 (2/5 > 1/3): 1/3.
    scale(&api, 4);
    wait_placed(
        &server,
        &api,
        "scaled down to 4",
        &[("member1", 1), ("member2", 3)],
    );
    assert_eq!(replicas_on_member(&server, "member3"), None);
}

#[test]
fn a_lua_health_rule_for_a_custom_kind_is_honoured() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    // A member that serves the custom kind (its API enablements list it).
    let agent_dir = tempfile::tempdir().unwrap();
    let ca = server.data_dir.join("tls.crt");
    let token = server.data_dir.join("join.token");
    let agent = flotilla_tests::Agent::start(&[
        "--server",
        &server.url,
        "--cluster-name",
        "member1",
        "--token-file",
        token.to_str().unwrap(),
        "--ca-file",
        ca.to_str().unwrap(),
        "--data-dir",
        agent_dir.path().to_str().unwrap(),
        "--sim-api",
        "example.io/v1/Widget",
        "--lease-renew-interval-ms",
        "300",
        "--cluster-status-update-frequency-ms",
        "300",
    ])
    .unwrap();
    let customization = serde_json::json!({
        "apiVersion": "config.karmada.io/v1alpha1", "kind": "ResourceInterpreterCustomization",
        "metadata": {"name": "widget-health"},
        "spec": {"target": {"apiVersion": "example.io/v1", "kind": "Widget"},
                 "customizations": {"healthInterpretation": {"luaScript":
                    "function InterpretHealth(observedObj)\n  return observedObj.status ~= nil and observedObj.status.ok == true\nend\n"}}}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/config.karmada.io/v1alpha1/resourceinterpretercustomizations",
            Some(&customization),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let widget = serde_json::json!({"apiVersion": "example.io/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 1}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/example.io/v1/namespaces/default/widgets",
            Some(&widget),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let policy = serde_json::json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "widgets", "namespace": "default"},
        "spec": {"resourceSelectors": [{"apiVersion": "example.io/v1", "kind": "Widget", "name": "w1"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["member1"]}}}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
            Some(&policy),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let rb = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/w1-widget";
    let health = |api: &ApiClient| -> Option<String> {
        let b = api.get(rb).ok()?;
        b["status"]["aggregatedStatus"][0]["health"]
            .as_str()
            .map(String::from)
    };
    let members = agent.url.clone();
    let set_ok = |ok: bool| {
        let body = serde_json::json!({"apiVersion": "example.io/v1", "kind": "Widget", "namespace": "default", "name": "w1",
            "status": {"ok": ok}});
        flotilla_tests::member_call("POST", &format!("{members}/faults/status"), Some(&body))
    };
    // The Widget reaches member1; its status says ok → Healthy by the Lua rule.
    eventually(
        "the widget applied on member1 and marked ok",
        Duration::from_secs(20),
        || match set_ok(true) {
            Ok((200, _)) => Ok(()),
            answer => {
                let b = api
                    .get(rb)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|e| e.to_string());
                let w = api
                    .get("/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member1/works")
                    .map(|v| v.to_string())
                    .unwrap_or_default();
                Err(format!("binding: {b}\nworks: {w}\nset_ok: {answer:?}"))
            }
        },
    );
    eventually("Healthy by the Lua rule", Duration::from_secs(60), || {
        (health(&api).as_deref() == Some("Healthy")).then_some(())
    });
    set_ok(false).unwrap();
    eventually("Unhealthy by the Lua rule", Duration::from_secs(60), || {
        (health(&api).as_deref() == Some("Unhealthy")).then_some(())
    });
}
