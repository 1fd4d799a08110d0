//! The real `flotilla-server` process: SIGTERM stops it cleanly (exit 0) and every write it
//! acknowledged is there after a restart on the same data directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::Server;
use serde_json::json;
use std::time::Duration;

fn client(server: &Server) -> reqwest::blocking::Client {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap()
}

#[test]
fn sigterm_stops_cleanly_and_acknowledged_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]).unwrap();
    let http = client(&server);
    for i in 0..20 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm{i}")}, "data": {"i": i.to_string()}});
        let r = http
            .post(format!(
                "{}/api/v1/namespaces/default/configmaps",
                server.url
            ))
            .bearer_auth(&server.token)
            .json(&cm)
            .send()
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    assert!(
        server.process.terminate(Duration::from_secs(20)).unwrap(),
        "exit status 0 after SIGTERM"
    );

    let server = Server::start(dir.path(), &[]).unwrap();
    let http = client(&server);
    let list: serde_json::Value = http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps",
            server.url
        ))
        .bearer_auth(&server.token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 20);
}
