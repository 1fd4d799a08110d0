//! Two servers on one etcd (started by the test, on 127.0.0.1) are one fleet for whoever
//! holds a credential: they share the admin and join tokens (the first server's files chose
//! them), one CA signs both serving certificates so that the first server's kubeconfig trusts
//! the second, and a member credential issued or revoked through one server is accepted or
//! refused by the other within a bounded wait, its open watches there ending with a 401.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use flotilla_server::app::{self, ServerConfig, ServerHandle, StoreBackend};
use flotilla_server::fleet;
use flotilla_server::store::etcd::EtcdConfig;
use flotilla_server::testing::etcd::EtcdCluster;
use flotilla_server::testing::eventually;
use futures::StreamExt;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How long a change made through one server may take to hold on the other.
const PROPAGATION: Duration = Duration::from_secs(10);
const CLUSTER: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const WORKS: &str = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-m1/works";

/// A server of the fleet on `etcd`, with HTTPS from the fleet's CA; `controllers` says
/// whether it runs them (the other serves the API alone).
async fn fleet_server(etcd: &EtcdCluster, dir: &Path, controllers: bool) -> ServerHandle {
    let mut config = ServerConfig::new(dir);
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.store_backend = StoreBackend::Etcd;
    config.etcd = EtcdConfig::new(etcd.endpoints());
    if !controllers {
        config.controllers = None;
    }
    app::start(config).await.expect("a fleet server starts")
}

/// The CA a server's kubeconfig trusts (its `certificate-authority-data`, decoded).
fn kubeconfig_ca(dir: &Path) -> Vec<u8> {
    let kubeconfig = std::fs::read_to_string(dir.join("kubeconfig")).unwrap();
    let data = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("the kubeconfig names a CA");
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .unwrap()
}

/// A client that trusts `ca_pem` and nothing else.
fn client_trusting(ca_pem: &[u8]) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem).unwrap())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Registers `cluster` through `server` with the join token; answers the member credential.
async fn register(
    client: &reqwest::Client,
    server: &ServerHandle,
    join: &str,
    cluster: &str,
) -> String {
    let answer = client
        .post(format!("{}/flotilla/v1/register", server.url()))
        .bearer_auth(join)
        .json(&json!({"clusterName": cluster}))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, 200, "registration: {body}");
    body["token"].as_str().expect("a credential").to_string()
}

/// The status `server` answers a member reading its own Cluster with `token`.
async fn status_for(client: &reqwest::Client, server: &ServerHandle, token: &str) -> u16 {
    client
        .get(format!("{}{CLUSTER}/m1", server.url()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Waits until `server` answers `want` to the member credential `token`.
async fn wait_status(
    client: &reqwest::Client,
    server: &ServerHandle,
    token: &str,
    want: u16,
    what: &str,
) {
    eventually(what, PROPAGATION, || async {
        let got = status_for(client, server, token).await;
        if got == want {
            Ok(())
        } else {
            Err(format!("answered {got}"))
        }
    })
    .await;
}

/// Opens a watch of m1's Works on `server` with `token`; the task answers the whole body once
/// the server ends the stream.
async fn open_watch(
    client: &reqwest::Client,
    server: &ServerHandle,
    token: &str,
) -> tokio::task::JoinHandle<String> {
    let answer = client
        .get(format!("{}{WORKS}?watch=true", server.url()))
        .bearer_auth(token)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "the watch opens");
    tokio::spawn(async move {
        let mut body = String::new();
        let mut chunks = answer.bytes_stream();
        while let Some(Ok(chunk)) = chunks.next().await {
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
        body
    })
}

/// Waits (bounded) for a watch to end, and checks it ended with a 401 `ERROR` event.
async fn assert_ended_unauthorized(watch: tokio::task::JoinHandle<String>, what: &str) {
    let body = tokio::time::timeout(PROPAGATION, watch)
        .await
        .unwrap_or_else(|_| panic!("{what}: the watch did not end within {PROPAGATION:?}"))
        .unwrap();
    let last: Value = serde_json::from_str(body.lines().last().unwrap_or("null")).unwrap();
    assert_eq!(last["type"], "ERROR", "{what}: {body}");
    assert_eq!(last["object"]["code"], 401, "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_etcd_share_their_credentials() {
    let etcd = EtcdCluster::start(1)
        .await
        .expect("etcd starts (scripts/setup.sh installs it)");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // The operator chose A's admin token; B's own differs and gives way to the fleet's.
    std::fs::write(
        dir_a.path().join("admin.token"),
        "fleet-admin-token-chosen-by-the-operator",
    )
    .unwrap();
    std::fs::write(dir_b.path().join("admin.token"), "a-token-b-had-before").unwrap();
    let a = fleet_server(&etcd, dir_a.path(), true).await;
    let b = fleet_server(&etcd, dir_b.path(), false).await;

    // One set of tokens.
    assert_eq!(a.admin_token, "fleet-admin-token-chosen-by-the-operator");
    assert_eq!(b.admin_token, a.admin_token);
    let join = std::fs::read_to_string(dir_a.path().join("join.token")).unwrap();
    for file in ["admin.token", "join.token"] {
        assert_eq!(
            std::fs::read_to_string(dir_a.path().join(file)).unwrap(),
            std::fs::read_to_string(dir_b.path().join(file)).unwrap(),
            "{file} is the same on both servers"
        );
    }

    // One CA: A's kubeconfig trusts B's certificate, and both data dirs hold that CA.
    let ca = kubeconfig_ca(dir_a.path());
    assert_eq!(
        ca,
        std::fs::read(dir_a.path().join(fleet::CA_FILE)).unwrap()
    );
    assert_eq!(
        ca,
        std::fs::read(dir_b.path().join(fleet::CA_FILE)).unwrap()
    );
    assert_ne!(
        std::fs::read(dir_a.path().join("tls.crt")).unwrap(),
        std::fs::read(dir_b.path().join("tls.crt")).unwrap(),
        "each server has a certificate of its own"
    );
    let client = client_trusting(&ca);
    for host in ["127.0.0.1", "localhost"] {
        let answer = client
            .get(format!("https://{host}:{}/apis", b.addr.port()))
            .bearer_auth(&a.admin_token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("B's certificate verifies with A's CA for {host}: {e:?}"));
        assert_eq!(answer.status(), 200, "A's admin token on B");
    }
    kubectl_with_kubeconfig_of(dir_a.path(), &b).await;
    // tls.crt carries the CA after the server's own certificate: a client told to trust one
    // server's tls.crt (as an agent's --ca-file) trusts the others.
    let bundle = std::fs::read(dir_b.path().join("tls.crt")).unwrap();
    let from_bundle = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem_bundle(&bundle)
                .unwrap()
                .pop()
                .expect("the CA closes the chain"),
        )
        .build()
        .unwrap();
    let answer = from_bundle
        .get(format!("{}/version", a.url()))
        .send()
        .await
        .expect("A's certificate verifies with the CA in B's tls.crt");
    assert_eq!(answer.status(), 200);

    // A credential issued through A holds on B, and a watch opened on B with it...
    let first = register(&client, &a, &join, "m1").await;
    wait_status(
        &client,
        &b,
        &first,
        200,
        "B to accept a credential A issued",
    )
    .await;
    let first_watch = open_watch(&client, &b, &first).await;

    // ...ends when A revokes it by a new registration; the new credential holds on B.
    let allow = client
        .patch(format!("{}{CLUSTER}/m1", a.url()))
        .bearer_auth(&a.admin_token)
        .header("Content-Type", "application/merge-patch+json")
        .body(
            json!({"metadata": {"annotations": {"flotilla.io/allow-reregistration": "true"}}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(allow.status(), 200, "{}", allow.text().await.unwrap());
    let second = register(&client, &a, &join, "m1").await;
    wait_status(
        &client,
        &b,
        &first,
        401,
        "B to refuse the credential A replaced",
    )
    .await;
    assert_ended_unauthorized(first_watch, "the replaced credential's watch on B").await;
    wait_status(&client, &b, &second, 200, "B to accept the new credential").await;

    // Deleting the Cluster through A revokes the credential on B, and ends its watch there.
    let second_watch = open_watch(&client, &b, &second).await;
    let deleted = client
        .delete(format!("{}{CLUSTER}/m1", a.url()))
        .bearer_auth(&a.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200, "{}", deleted.text().await.unwrap());
    assert_eq!(
        status_for(&client, &a, &second).await,
        401,
        "A revokes at once"
    );
    wait_status(
        &client,
        &b,
        &second,
        401,
        "B to refuse the credential of the deleted cluster",
    )
    .await;
    assert_ended_unauthorized(second_watch, "the deleted cluster's watch on B").await;

    // The other way round: a credential issued through B holds on A.
    let third = register(&client, &b, &join, "m1").await;
    wait_status(
        &client,
        &a,
        &third,
        200,
        "A to accept a credential B issued",
    )
    .await;

    b.shutdown().await.expect("B stops");
    a.shutdown().await.expect("A stops");
}

/// A restarted server of the fleet keeps the fleet's CA and tokens, and a third server that
/// joins later gets them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_credentials_outlive_its_servers() {
    let etcd = EtcdCluster::start(1)
        .await
        .expect("etcd starts (scripts/setup.sh installs it)");
    let (dir_a, dir_c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = fleet_server(&etcd, dir_a.path(), false).await;
    let (admin, ca) = (a.admin_token.clone(), kubeconfig_ca(dir_a.path()));
    a.shutdown().await.expect("A stops");
    // A's files are gone: the store still has what they held.
    for file in [
        "admin.token",
        "join.token",
        "ca.crt",
        "tls.crt",
        "tls.key",
        "kubeconfig",
    ] {
        std::fs::remove_file(dir_a.path().join(file)).unwrap();
    }
    let a = fleet_server(&etcd, dir_a.path(), false).await;
    let c = fleet_server(&etcd, dir_c.path(), false).await;
    assert_eq!(a.admin_token, admin);
    assert_eq!(c.admin_token, admin);
    assert_eq!(kubeconfig_ca(dir_a.path()), ca);
    assert_eq!(kubeconfig_ca(dir_c.path()), ca);
    let client = client_trusting(&ca);
    for server in [&a, &c] {
        let answer = client
            .get(format!("{}/version", server.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    c.shutdown().await.expect("C stops");
    a.shutdown().await.expect("A stops");
}

/// kubectl with A's kubeconfig, pointed at B, verifies B's certificate and authenticates.
async fn kubectl_with_kubeconfig_of(dir_a: &Path, b: &ServerHandle) {
    let kubeconfig = dir_a.join("kubeconfig");
    let cache = dir_a.join("kubectl-cache");
    let server = format!("https://127.0.0.1:{}", b.addr.port());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args([
                "--server",
                &server,
                "--request-timeout",
                "30s",
                "get",
                "clusters",
            ])
            .output()
    })
    .await
    .unwrap()
    .expect("kubectl runs (scripts/setup.sh installs it)");
    assert!(
        output.status.success(),
        "kubectl --kubeconfig A --server B get clusters: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
