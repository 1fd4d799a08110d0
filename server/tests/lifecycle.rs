//! Starting and stopping the server: HTTPS with rustls, the admin token and kubeconfig files,
//! graceful shutdown with a watch open, and durability across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_server::app::{self, ServerConfig, Tls};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn https_with_the_kubeconfig_ca() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let mut config = ServerConfig::new(dir.path().join("data"));
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Tls::Files {
        cert: cert_path,
        key: key_path,
    };
    let server = app::start(config).await.unwrap();
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let kubeconfig = std::fs::read_to_string(dir.path().join("data/kubeconfig")).unwrap();
    assert!(kubeconfig.contains("certificate-authority-data:"));
    assert!(kubeconfig.contains(&server.url()));
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let v: Value = client
        .get(format!("{}/apis", server.url()))
        .bearer_auth(&server.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["kind"], "APIGroupList");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn token_files_are_private_and_stable_and_data_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        let mut config = ServerConfig::new(dir.path());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.tls = Tls::Plain;
        app::start(config)
    };
    let server = start().await.unwrap();
    let token = server.admin_token.clone();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in ["admin.token", "kubeconfig"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }
    let client = reqwest::Client::new();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}, "data": {"a": "1"}});
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let r = client
        .post(&url)
        .bearer_auth(&token)
        .json(&cm)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // A watch is open while the server shuts down: shutdown still completes.
    let watch = client
        .get(format!("{url}?watch=true"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown finished with a watch open")
        .unwrap();
    drop(watch);

    let server = start().await.unwrap();
    assert_eq!(
        server.admin_token, token,
        "the token is kept across restarts"
    );
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let got: Value = client
        .get(format!("{url}/keep"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["data"]["a"], "1");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn default_is_https_with_a_self_signed_certificate_kept_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        let mut config = ServerConfig::new(dir.path());
        config.listen = "127.0.0.1:0".parse().unwrap();
        app::start(config)
    };
    let server = start().await.unwrap();
    assert!(server.url().starts_with("https://"));
    let pem = std::fs::read_to_string(dir.path().join("tls.crt")).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/api", server.url()))
        .bearer_auth(&server.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.shutdown().await.unwrap();
    let server = start().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tls.crt")).unwrap(),
        pem
    );
    server.shutdown().await.unwrap();
}
