//! Members benchmark (plain `main`, not a test): 1,000 simulated members in one agent process
//! heartbeating at the default periods (lease every 10 s, status every 10 s) against one server.
//! Reports the server's CPU and resident memory over a measurement window and the p50/p99
//! latency of lease updates as the server's request histogram sees them.
//!
//! Run: `cargo bench -p flotilla-tests --bench members` (release binaries). `MEMBERS` (1000)
//! and `WINDOW_SECONDS` (60) change the scale and the window. Figures go to docs/members.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::bench::{cpu_seconds, env_or};
use flotilla_tests::{eventually, ApiClient, Server};
use std::time::{Duration, Instant};

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024.0
}

/// (le, cumulative count) of the lease update latency histogram.
fn lease_buckets(metrics: &str) -> Vec<(f64, f64)> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("flotilla_apiserver_request_duration_seconds_bucket")
                && l.contains("resource=\"leases\"")
                && l.contains("verb=\"update\"")
        })
        .map(|l| {
            let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            let count: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            (le, count)
        })
        .collect()
}

fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> (f64, f64) {
    let deltas: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, c)| {
            (
                *le,
                c - before
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, c)| *c),
            )
        })
        .collect();
    let total = deltas.last().map_or(0.0, |(_, c)| *c);
    let want = total * q;
    let bound = deltas
        .iter()
        .find(|(_, c)| *c >= want)
        .map_or(f64::INFINITY, |(le, _)| *le);
    (bound, total)
}

fn main() {
    let members = env_or("MEMBERS", 1000);
    let window = env_or("WINDOW_SECONDS", 60);
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let start = Instant::now();
    let agent = flotilla_tests::bench::sim_members_agent(
        &server,
        agent_dir.path(),
        members,
        &["--member-prefix", "sim"],
    );
    eventually("every member Ready", Duration::from_secs(600), || {
        let list = api.get("/apis/cluster.karmada.io/v1alpha1/clusters").ok()?;
        let ready = list["items"]
            .as_array()?
            .iter()
            .filter(|c| {
                c.pointer("/status/conditions")
                    .and_then(|v| v.as_array())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
            .count();
        (ready as u64 == members).then_some(())
    });
    println!(
        "{members} members joined and Ready in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    let pid = server.process.child.id();
    let before = lease_buckets(&reqwest_metrics(&server));
    let cpu0 = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(window));
    let cpu1 = cpu_seconds(pid);
    let after = lease_buckets(&reqwest_metrics(&server));
    let (p50, n) = quantile(&before, &after, 0.50);
    let (p99, _) = quantile(&before, &after, 0.99);
    println!("| members | window | lease updates/s | server CPU | server RSS | lease update p50 | lease update p99 |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {members} | {window} s | {:.1} | {:.1} % of one core | {:.0} MiB | ≤ {} ms | ≤ {} ms |",
        n / window as f64,
        (cpu1 - cpu0) / window as f64 * 100.0,
        rss_mib(pid),
        p50 * 1e3,
        p99 * 1e3
    );
    drop(agent);
}

fn reqwest_metrics(server: &Server) -> String {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    let http = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    http.get(format!("{}/metrics", server.url))
        .bearer_auth(&server.token)
        .send()
        .unwrap()
        .text()
        .unwrap()
}
