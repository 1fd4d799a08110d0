//! Real member clusters end to end: the control plane places Works on members that are
//! Kubernetes API servers, reached in pull mode by `flotilla-agent --runtime kube` with the
//! member's kubeconfig, and in push mode by the control plane itself with the token and CA
//! bundle of the Cluster's `spec.secretRef`.
//!
//! No kube-apiserver can be installed where these tests run, so each member's API is another
//! `flotilla-server` in `--no-controllers` mode: an API server with no controllers, as
//! controller-runtime's envtest runs one. As in envtest, nothing there turns a Deployment into
//! pods: a [`StatusWriter`] plays the member's deployment controller and writes each
//! Deployment's status (all replicas available, or none for the ones the test breaks), with the
//! `observedGeneration` of the generation it saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::{
    eventually, healthy_on, placement_of, post_manifests, scenario_text, wait_members_ready,
    works_on, Agent, ApiClient, Server, EXACTLY_ONCE_DB, NO_EVICTION_PACING,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const NGINX: &str = "/apis/apps/v1/namespaces/default/deployments/nginx";

/// One member cluster's API: a `flotilla-server --no-controllers`, and a client of it.
struct MemberApi {
    name: String,
    server: Server,
    api: ApiClient,
}

impl MemberApi {
    fn start(data: &Path, name: &str) -> MemberApi {
        let dir = data.join(format!("{name}-api"));
        std::fs::create_dir_all(&dir).unwrap();
        let server = Server::start(&dir, &["--no-controllers"]).expect("a member API server");
        let api = ApiClient::admin(&server).unwrap();
        let member = MemberApi {
            name: name.to_string(),
            server,
            api,
        };
        member.add_nodes(2);
        member
    }

    /// Ready Nodes with allocatable capacity, as a test of envtest writes them.
    fn add_nodes(&self, n: usize) {
        for i in 0..n {
            let name = format!("{}-node-{i}", self.name);
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
            let (code, body) = self.api.send("POST", "/api/v1/nodes", Some(&node)).unwrap();
            assert_eq!(code, 201, "creating Node {name}: {body}");
            let mut node = body;
            node["status"] = json!({
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            });
            let path = format!("/api/v1/nodes/{name}/status");
            let (code, body) = self.api.send("PUT", &path, Some(&node)).unwrap();
            assert_eq!(code, 200, "writing Node {name}'s status: {body}");
        }
    }

    /// The member's nginx Deployment, if it has one.
    fn nginx(&self) -> Option<Value> {
        match self.api.send("GET", NGINX, None).unwrap() {
            (200, v) => Some(v),
            (404, _) => None,
            (code, v) => panic!("GET nginx on {} answered {code}: {v}", self.name),
        }
    }
}

/// Plays the members' deployment controllers: every 200 ms, writes each Deployment's status
/// for the generation it has, all replicas available unless its name is in `broken` (then
/// none). Stops when dropped.
struct StatusWriter {
    stop: Arc<AtomicBool>,
    broken: Arc<Mutex<BTreeSet<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusWriter {
    fn start(members: Vec<ApiClient>) -> StatusWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let broken = Arc::new(Mutex::new(BTreeSet::new()));
        let thread = {
            let (stop, broken) = (stop.clone(), broken.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    for api in &members {
                        let broken = broken.lock().unwrap().clone();
                        write_deployment_statuses(api, &broken);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        StatusWriter {
            stop,
            broken,
            thread: Some(thread),
        }
    }

    /// From now on, Deployments named `name` have no available replica.
    fn break_deployment(&self, name: &str) {
        self.broken.lock().unwrap().insert(name.to_string());
    }
}

impl Drop for StatusWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The status a deployment controller would write for `deployment`.
fn deployment_status(deployment: &Value, available: bool) -> Value {
    let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let ready = if available { replicas } else { 0 };
    json!({
        "observedGeneration": deployment["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": replicas - ready,
        "conditions": [{
            "type": "Available",
            "status": if available { "True" } else { "False" },
            "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
        }],
    })
}

fn write_deployment_statuses(api: &ApiClient, broken: &BTreeSet<String>) {
    // A member that is down (killed on purpose) just answers nothing this round.
    let Ok((200, list)) = api.send("GET", "/apis/apps/v1/deployments", None) else {
        return;
    };
    for d in list["items"].as_array().cloned().unwrap_or_default() {
        let name = d["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ns = d["metadata"]["namespace"].as_str().unwrap_or("default");
        let want = deployment_status(&d, !broken.contains(&name));
        if d["status"] == want {
            continue;
        }
        let mut body = d.clone();
        body["apiVersion"] = json!("apps/v1");
        body["kind"] = json!("Deployment");
        body["status"] = want;
        let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}/status");
        // A conflict (the agent applied meanwhile) is written again on the next round.
        let _ = api.send("PUT", &path, Some(&body));
    }
}

/// `flotilla-agent --runtime kube` for member `member`, registered with `control`.
fn kube_agent(control: &Server, member: &MemberApi, data: &Path) -> Agent {
    kube_agent_with(control, member, data, &[])
}

/// As [`kube_agent`], with `extra` flags.
fn kube_agent_with(control: &Server, member: &MemberApi, data: &Path, extra: &[&str]) -> Agent {
    let kubeconfig = member.server.kubeconfig().display().to_string();
    let dir = data.join(&member.name).display().to_string();
    let token = control.data_dir.join("join.token").display().to_string();
    let ca = control.data_dir.join("tls.crt").display().to_string();
    Agent::start(
        &[
            "--runtime",
            "kube",
            "--kubeconfig",
            &kubeconfig,
            "--server",
            &control.url,
            "--cluster-name",
            &member.name,
            "--token-file",
            &token,
            "--ca-file",
            &ca,
            "--data-dir",
            &dir,
            "--lease-renew-interval-ms",
            "300",
            "--cluster-status-update-frequency-ms",
            "300",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<&str>>(),
    )
    .expect("starting flotilla-agent --runtime kube")
}

/// The control plane with second-scale failure detection and no eviction pacing.
fn control_plane(data: &Path, extra: &[&str]) -> (Server, ApiClient) {
    let dir = data.join("control-plane");
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<&str> = ["--fast-failover"]
        .iter()
        .chain(NO_EVICTION_PACING)
        .chain(extra)
        .copied()
        .collect();
    let server = Server::start(&dir, &args).expect("the control plane");
    let api = ApiClient::admin(&server).unwrap();
    (server, api)
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Scenario 02 (Divided 1:2 over member1 and member2), with the members' objects checked
/// where they live.
fn expect_scenario_02_placed(api: &ApiClient, members: &[&MemberApi]) {
    post_manifests(api, &scenario_text("02-divided-weighted-failover.yaml"));
    for (member, replicas) in members.iter().zip([1, 2]) {
        let d = eventually(
            &format!("nginx with {replicas} replicas in {}'s API", member.name),
            Duration::from_secs(60),
            || member.nginx().filter(|d| d["spec"]["replicas"] == replicas),
        );
        let labels = &d["metadata"]["labels"];
        let annotations = &d["metadata"]["annotations"];
        assert_eq!(labels["karmada.io/managed"], "true", "{d}");
        assert_eq!(
            labels["app"], "nginx",
            "the template's own labels stay: {d}"
        );
        assert_eq!(
            annotations["work.karmada.io/namespace"],
            format!("karmada-es-{}", member.name),
            "{d}"
        );
        assert_eq!(
            annotations["resourcebinding.karmada.io/name"],
            "nginx-deployment"
        );
        assert!(annotations["work.karmada.io/name"].is_string(), "{d}");
        assert!(
            annotations["resourcetemplate.karmada.io/generation"].is_string(),
            "{d}"
        );
    }
}

/// What the status writer made of the members' Deployments reaches the binding and the
/// template: both members Healthy, 3 available replicas on the template.
fn expect_status_aggregated(api: &ApiClient) {
    eventually(
        "nginx Healthy on both members",
        Duration::from_secs(60),
        || (healthy_on(api, RB, "member1") && healthy_on(api, RB, "member2")).then_some(()),
    );
    eventually(
        "the template's status: 3 available",
        Duration::from_secs(60),
        || {
            let t = api.get(NGINX).ok()?;
            (t["status"]["availableReplicas"] == 3 && t["status"]["readyReplicas"] == 3)
                .then_some(())
        },
    );
}

#[test]
fn pull_members_on_real_apis_place_report_fail_over_and_clean_up() {
    let data = tempfile::tempdir().unwrap();
    let (control, api) = control_plane(data.path(), &[]);
    let m1 = MemberApi::start(data.path(), "member1");
    let m2 = MemberApi::start(data.path(), "member2");
    let _status = StatusWriter::start(vec![
        ApiClient::admin(&m1.server).unwrap(),
        ApiClient::admin(&m2.server).unwrap(),
    ]);
    let mut a1 = kube_agent(&control, &m1, data.path());
    let _a2 = kube_agent(&control, &m2, data.path());
    wait_members_ready(&api, 2);

    // The cluster status comes from the member's API: version, APIs, Nodes.
    let cluster = api
        .get("/apis/cluster.karmada.io/v1alpha1/clusters/member1")
        .unwrap();
    let status = &cluster["status"];
    assert!(status["kubernetesVersion"].is_string(), "{status}");
    assert!(
        status["apiEnablements"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["groupVersion"] == "apps/v1")),
        "{status}"
    );
    eventually(
        "member1's node summary from its Nodes",
        Duration::from_secs(30),
        || {
            let c = api
                .get("/apis/cluster.karmada.io/v1alpha1/clusters/member1")
                .ok()?;
            (c["status"]["nodeSummary"]["totalNum"] == 2
                && c["status"]["nodeSummary"]["readyNum"] == 2)
                .then_some(())
        },
    );

    expect_scenario_02_placed(&api, &[&m1, &m2]);
    expect_status_aggregated(&api);

    // member1's agent dies: the member turns Unknown, and its share moves to member2.
    a1.process.kill();
    eventually("member1 Unknown", Duration::from_secs(30), || {
        let c = api
            .get("/apis/cluster.karmada.io/v1alpha1/clusters/member1")
            .ok()?;
        (condition(&c, "Ready")?["status"] == "Unknown").then_some(())
    });
    eventually("all 3 replicas on member2", Duration::from_secs(60), || {
        let p = placement_of(&api, RB)?;
        (p == [("member2".to_string(), 3)]).then_some(())
    });
    eventually(
        "member2's Deployment scaled to 3 and Healthy",
        Duration::from_secs(60),
        || {
            let d = m2.nginx()?;
            (d["spec"]["replicas"] == 3 && healthy_on(&api, RB, "member2")).then_some(())
        },
    );
    // The old copy is still in member1's API: nobody could delete it while its agent was gone.
    assert!(
        m1.nginx().is_some(),
        "member1's copy stays while its agent is down"
    );

    // The agent comes back: member1's stale copy is deleted from its API, and its Work goes.
    let _a1 = kube_agent(&control, &m1, data.path());
    eventually(
        "member1's stale Deployment deleted from its API",
        Duration::from_secs(60),
        || m1.nginx().is_none().then_some(()),
    );
    eventually("member1's Work gone", Duration::from_secs(60), || {
        works_on(&api, "member1").is_empty().then_some(())
    });
}

#[test]
fn a_foreign_object_of_the_same_name_is_left_alone_and_the_work_says_so() {
    let data = tempfile::tempdir().unwrap();
    let (control, api) = control_plane(data.path(), &[]);
    let m1 = MemberApi::start(data.path(), "member1");
    let m2 = MemberApi::start(data.path(), "member2");
    // member2 already runs an nginx that Flotilla did not create.
    let foreign = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"owner": "someone-else"}},
        "spec": {"replicas": 7, "selector": {"matchLabels": {"app": "other"}},
            "template": {"metadata": {"labels": {"app": "other"}},
                "spec": {"containers": [{"name": "c", "image": "other"}]}}}});
    let (code, body) = m2
        .api
        .send(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            Some(&foreign),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let _status = StatusWriter::start(vec![ApiClient::admin(&m1.server).unwrap()]);
    let _a1 = kube_agent(&control, &m1, data.path());
    let _a2 = kube_agent(&control, &m2, data.path());
    wait_members_ready(&api, 2);
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));

    // member1 gets its share; member2's Work reports the conflict.
    eventually("nginx in member1's API", Duration::from_secs(60), || {
        m1.nginx().filter(|d| d["spec"]["replicas"] == 1)
    });
    let message = eventually(
        "member2's Work Applied=False",
        Duration::from_secs(60),
        || {
            let works = works_on(&api, "member2");
            let applied = condition(works.first()?, "Applied")?.clone();
            (applied["status"] == "False").then(|| applied["message"].as_str().map(String::from))?
        },
    );
    assert!(
        message.contains("not created by Flotilla") || message.contains("conflict"),
        "the message says why: {message}"
    );
    let d = m2.nginx().expect("the foreign Deployment is still there");
    assert_eq!(d["spec"]["replicas"], 7, "left as it was: {d}");
    assert_eq!(d["metadata"]["labels"]["owner"], "someone-else", "{d}");
    assert!(
        d["metadata"]["labels"].get("karmada.io/managed").is_none(),
        "not marked as Flotilla's: {d}"
    );
}

#[test]
fn an_unavailable_deployment_in_a_real_member_moves_to_another() {
    let data = tempfile::tempdir().unwrap();
    let (control, api) = control_plane(data.path(), &[]);
    let members: Vec<MemberApi> = ["member1", "member2", "member3"]
        .iter()
        .map(|n| MemberApi::start(data.path(), n))
        .collect();
    let status = StatusWriter::start(
        members
            .iter()
            .map(|m| ApiClient::admin(&m.server).unwrap())
            .collect(),
    );
    let _agents: Vec<Agent> = members
        .iter()
        .map(|m| kube_agent(&control, m, data.path()))
        .collect();
    wait_members_ready(&api, 3);
    let text = scenario_text("03-application-failover.yaml")
        .replace("tolerationSeconds: 120", "tolerationSeconds: 2");
    post_manifests(&api, &text);
    let first = eventually(
        "nginx Healthy on one member",
        Duration::from_secs(60),
        || match placement_of(&api, RB)?.as_slice() {
            [(name, 2)] if healthy_on(&api, RB, name) => Some(name.clone()),
            _ => None,
        },
    );

    // The Deployment loses every available replica in its member's API; the member stays Ready.
    status.break_deployment("nginx");
    let second = eventually(
        "nginx moved to another member",
        Duration::from_secs(60),
        || match placement_of(&api, RB)?.as_slice() {
            [(name, 2)] if *name != first => Some(name.clone()),
            _ => None,
        },
    );
    let member = members.iter().find(|m| m.name == second).unwrap();
    eventually(
        "nginx in the new member's API",
        Duration::from_secs(60),
        || member.nginx().filter(|d| d["spec"]["replicas"] == 2),
    );
}

/// Push-mode timings: probes every 300 ms, Ready flips after 1 s, the NoExecute taint 1 s
/// after that, tolerated for 0 s.
const PUSH_FAST: &[&str] = &[
    "--cluster-status-update-frequency",
    "300ms",
    "--push-status-period",
    "500ms",
    "--member-probe-timeout",
    "1s",
    "--cluster-failure-threshold",
    "1s",
    "--cluster-success-threshold",
    "1s",
    "--failover-eviction-timeout",
    "1s",
    "--default-not-ready-toleration-seconds",
    "0",
    "--default-unreachable-toleration-seconds",
    "0",
];

/// Joins `member` in push mode as `karmadactl join` does: a Secret with the member API's
/// token and CA bundle in `karmada-cluster`, and a Cluster naming it.
fn join_push(api: &ApiClient, name: &str, endpoint: &str, token: &str, ca_pem: &[u8]) {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let ns =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karmada-cluster"}});
    let (code, body) = api.send("POST", "/api/v1/namespaces", Some(&ns)).unwrap();
    assert!(code == 201 || code == 409, "{code}: {body}");
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "karmada-cluster"},
        "data": {"token": b64(token.as_bytes()), "caBundle": b64(ca_pem)}});
    let (code, body) = api
        .send(
            "POST",
            "/api/v1/namespaces/karmada-cluster/secrets",
            Some(&secret),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let cluster = json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"syncMode": "Push", "apiEndpoint": endpoint,
            "secretRef": {"namespace": "karmada-cluster", "name": name}}});
    let (code, body) = api
        .send(
            "POST",
            "/apis/cluster.karmada.io/v1alpha1/clusters",
            Some(&cluster),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
}

/// `scripts/join-push-member.sh` with the member API's kubeconfig and token, against the
/// control plane's kubeconfig.
fn join_with_script(control: &Server, member: &MemberApi) {
    flotilla_tests::require_kubectl();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/join-push-member.sh");
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(&member.name)
        .arg("--cluster-kubeconfig")
        .arg(member.server.kubeconfig())
        // Flotilla's own API server does not serve TokenRequest: give the token.
        .arg("--token")
        .arg(&member.server.token)
        .env("CONTROL_PLANE_KUBECONFIG", control.kubeconfig())
        .env("KUBECACHEDIR", cache.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "join-push-member.sh failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("joined in push mode"), "{said}");
}

fn join_member_push(api: &ApiClient, member: &MemberApi) {
    let ca = std::fs::read(member.server.data_dir.join("tls.crt")).unwrap();
    join_push(
        api,
        &member.name,
        &member.server.url,
        &member.server.token,
        &ca,
    );
}

#[test]
fn push_members_on_real_apis_place_report_and_fail_over() {
    let data = tempfile::tempdir().unwrap();
    let (control, api) = control_plane(data.path(), PUSH_FAST);
    let mut m1 = MemberApi::start(data.path(), "member1");
    let m2 = MemberApi::start(data.path(), "member2");
    let _status = StatusWriter::start(vec![
        ApiClient::admin(&m1.server).unwrap(),
        ApiClient::admin(&m2.server).unwrap(),
    ]);
    // member1 joins with the join helper, as a user would; member2 by hand, as
    // `join_push` shows the objects it makes.
    join_with_script(&control, &m1);
    join_member_push(&api, &m2);
    // A third member whose credential the member API refuses: NotReady, and the Ready
    // condition says why.
    let ca = std::fs::read(m2.server.data_dir.join("tls.crt")).unwrap();
    join_push(&api, "member3", &m2.server.url, "not-a-valid-token", &ca);
    wait_members_ready(&api, 2);
    let refused = eventually(
        "member3 NotReady for its credential",
        Duration::from_secs(30),
        || {
            let c = api
                .get("/apis/cluster.karmada.io/v1alpha1/clusters/member3")
                .ok()?;
            let ready = condition(&c, "Ready")?;
            (ready["status"] == "False").then(|| ready["message"].as_str().map(String::from))?
        },
    );
    assert!(refused.contains("credential"), "{refused}");

    let cluster = api
        .get("/apis/cluster.karmada.io/v1alpha1/clusters/member1")
        .unwrap();
    assert!(
        cluster["status"]["kubernetesVersion"].is_string(),
        "{cluster}"
    );

    expect_scenario_02_placed(&api, &[&m1, &m2]);
    expect_status_aggregated(&api);

    // member1's API stops answering: the probes fail, and its share moves to member2.
    m1.server.process.kill();
    eventually("all 3 replicas on member2", Duration::from_secs(60), || {
        let p = placement_of(&api, RB)?;
        (p == [("member2".to_string(), 3)]).then_some(())
    });
    eventually(
        "member2's Deployment scaled to 3 and Healthy",
        Duration::from_secs(60),
        || {
            let d = m2.nginx()?;
            (d["spec"]["replicas"] == 3 && healthy_on(&api, RB, "member2")).then_some(())
        },
    );
    // Once the eviction task ends, the old Work is deleted, and waits for member1 with its
    // finalizer: nothing can delete the copy while member1's API is down.
    eventually(
        "member1's Work deleting, held by its finalizer",
        Duration::from_secs(60),
        || {
            let works = works_on(&api, "member1");
            (!works.is_empty()
                && works
                    .iter()
                    .all(|w| w["metadata"]["deletionTimestamp"].is_string()))
            .then_some(())
        },
    );
}

const DB: &str = "/apis/apps/v1/namespaces/default/deployments/db";

#[test]
fn a_cut_off_kube_agent_fences_its_exactly_once_workload_in_the_members_api() {
    let data = tempfile::tempdir().unwrap();
    let (control, api) = control_plane(data.path(), &["--member-fence-after", "6s"]);
    let m1 = MemberApi::start(data.path(), "member1");
    let m2 = MemberApi::start(data.path(), "member2");
    let _status = StatusWriter::start(vec![
        ApiClient::admin(&m1.server).unwrap(),
        ApiClient::admin(&m2.server).unwrap(),
    ]);
    // member1 alone first, so the single copy lands there.
    let a1 = kube_agent_with(&control, &m1, data.path(), &["--fence-after", "3s"]);
    wait_members_ready(&api, 1);
    post_manifests(&api, EXACTLY_ONCE_DB);
    eventually("db in member1's API", Duration::from_secs(60), || {
        let (code, _) = m1.api.send("GET", DB, None).ok()?;
        (code == 200).then_some(())
    });
    let _a2 = kube_agent_with(&control, &m2, data.path(), &["--fence-after", "3s"]);
    wait_members_ready(&api, 2);

    // member1's agent is cut off from the control plane (it keeps running, renews no lease):
    // after 3 s it deletes the workload from member1's API itself, and only then does the
    // replacement start on member2.
    flotilla_tests::set_agent_fault(&a1, "unreachable", true);
    let exists = |m: &MemberApi| {
        m.api
            .send("GET", DB, None)
            .ok()
            .map(|(code, _)| code == 200)
    };
    eventually(
        "db fenced in member1's API, then running in member2's",
        Duration::from_secs(60),
        || {
            // member2 first: a copy seen there must already be gone from member1.
            let on2 = exists(&m2)?;
            let on1 = exists(&m1)?;
            assert!(
                !(on1 && on2),
                "two copies of an exactly-once workload at once"
            );
            (on2 && !on1).then_some(())
        },
    );
}
