//! Restart benchmark (plain `main`, not a test): how well the API answers while the
//! controllers catch up after a restart over a large store, and how long the catch-up takes.
//!
//! One release `flotilla-server --sim-members MEMBERS` (simulated pull members in one
//! `flotilla-agent` the server starts) is given one PropagationPolicy that places every
//! Deployment labelled `bench=restart` Duplicated on every member, then `BINDINGS` Deployments
//! of one replica: `BINDINGS` ResourceBindings and `BINDINGS × MEMBERS` Works, all made by the
//! real code paths (detector, scheduler, binding controller, the agent applying and reporting).
//! Once every controller's queue is empty, the server is stopped with SIGTERM and started
//! again on the same data directory.
//!
//! From the moment the restarted server prints that it listens, `CLIENTS` client threads send
//! requests open loop, each at `RATE` requests per second in turn of five kinds: `GET /metrics`,
//! GET one Deployment, list the Clusters, `GET /apis` and a small POST (a ConfigMap). A
//! request's latency counts from the time it was due, not from when it was sent, so a client
//! held up by a slow answer adds the delay to the requests behind it (no coordinated
//! omission). A monitor thread reads `/metrics` every 250 ms (its requests count as
//! `GET /metrics` too) until every controller's `flotilla_controller_queue_depth` and
//! `flotilla_controller_busy` (reconciles running plus feeds still listing) are 0: the
//! catch-up has ended. It prints p50 / p99 / max per request kind during the catch-up, the
//! time until the queues were empty, the slowest request per few seconds, and the CPU the
//! server spent.
//!
//! Building the state is the slow part (minutes at the default scale). `STATE_DIR=<dir>`
//! keeps it: the first run saves the stopped server's data directory there, later runs copy it
//! and only restart.
//!
//! Run: `cargo bench -p flotilla-tests --bench restart`. Knobs (environment): `BINDINGS`
//! (20000), `MEMBERS` (6), `CLIENTS` (4), `RATE` (10 requests per second per client),
//! `STATE_DIR`, `SERVER_ARGS` (more server flags, split on whitespace, for both starts),
//! `TIMEOUT_SECONDS` (600, the longest catch-up waited for) and `PERF_RECORD` (a file: `perf
//! record --call-graph dwarf` of the restarted server during the catch-up). Figures go to
//! docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::bench::{cpu_seconds, env_or};
use flotilla_tests::{eventually, wait_members_ready, ApiClient, Server};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn policy(members: u64) -> Value {
    let names: Vec<String> = (1..=members).map(|i| format!("member{i}")).collect();
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "bench-restart", "namespace": "default"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                   "labelSelector": {"matchLabels": {"bench": "restart"}}}],
            "placement": {
                "clusterAffinity": {"clusterNames": names},
                "replicaScheduling": {"replicaSchedulingType": "Duplicated"}
            }
        }
    })
}

fn deployment(i: u64) -> Value {
    let name = format!("app-{i}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": "restart"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    })
}

fn http_client(server: &Server) -> reqwest::blocking::Client {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// The server's Prometheus samples (`name{labels}` → value).
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn scrape(http: &reqwest::blocking::Client, server: &Server) -> HashMap<String, f64> {
    let text = http
        .get(format!("{}/metrics", server.url))
        .bearer_auth(&server.token)
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    samples(&text)
}

/// Keys waiting plus work running, summed over every controller; `None` when the server has
/// no such gauges (an older build: use one from this benchmark's commit on).
fn controller_work(m: &HashMap<String, f64>) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for (k, v) in m {
        if k.starts_with("flotilla_controller_queue_depth{")
            || k.starts_with("flotilla_controller_busy{")
        {
            found |= k.starts_with("flotilla_controller_busy{");
            sum += v;
        }
    }
    found.then_some(sum)
}

fn stored(m: &HashMap<String, f64>, kind: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with("flotilla_store_objects{") && k.contains(kind))
        .map(|(_, v)| *v)
        .sum()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Server flags of both starts.
fn server_args(members: u64) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--sim-members".into(),
        members.to_string(),
        "--sim-pod-startup-delay-ms".into(),
        "0".into(),
    ];
    if let Ok(extra) = std::env::var("SERVER_ARGS") {
        args.extend(extra.split_whitespace().map(str::to_string));
    }
    args
}

/// Builds the stored state through the real code paths and stops the server.
fn prepare(data: &Path, bindings: u64, members: u64, args: &[&str]) {
    let started = Instant::now();
    let mut server = Server::start(data, args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    wait_members_ready(&api, members as usize);
    let (code, body) = api
        .send(
            "POST",
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
            Some(&policy(members)),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    // A create whose answer was lost is sent again (409: it was made).
    flotilla_tests::bench::post_deployments(&api, bindings, deployment);
    println!(
        "{bindings} Deployments created in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // Every binding and Work stored, then every queue empty and the writes down to the
    // members' heartbeats for two looks in a row.
    let http = http_client(&server);
    let works = (bindings * members) as f64;
    let mut last_writes = None;
    let mut quiet = 0;
    eventually(
        "every binding and Work stored and the controllers idle",
        Duration::from_secs(600 + bindings / 5),
        || {
            std::thread::sleep(Duration::from_secs(5));
            let m = scrape(&http, &server);
            let writes = m
                .get("flotilla_store_flushed_writes_total")
                .copied()
                .unwrap_or(0.0);
            let calm = last_writes.is_some_and(|w: f64| writes - w < 100.0);
            last_writes = Some(writes);
            let (rbs, ws) = (
                stored(&m, "\"work.karmada.io/resourcebindings\""),
                stored(&m, "\"work.karmada.io/works\""),
            );
            let ok =
                rbs >= bindings as f64 && ws >= works && controller_work(&m) == Some(0.0) && calm;
            quiet = if ok { quiet + 1 } else { 0 };
            if quiet >= 2 {
                Ok(())
            } else {
                Err(format!(
                    "bindings {rbs}, Works {ws}, controller work {:?}, writes {writes}",
                    controller_work(&m)
                ))
            }
        },
    );
    println!(
        "state built in {:.0} s: {bindings} bindings, {} Works",
        started.elapsed().as_secs_f64(),
        bindings * members
    );
    let stopped = Instant::now();
    let clean = server.process.terminate(Duration::from_secs(120)).unwrap();
    assert!(clean, "the server did not exit cleanly on SIGTERM");
    println!(
        "server stopped (SIGTERM) in {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

/// One request of a client: its kind, when it was due (since the server listened), its
/// latency from then, and its status (0: no answer).
struct Sample {
    kind: &'static str,
    due: f64,
    latency: f64,
    status: u16,
}

const KINDS: [&str; 5] = [
    "GET /metrics",
    "GET a Deployment",
    "list Clusters",
    "GET /apis",
    "POST a ConfigMap",
];

fn request(
    http: &reqwest::blocking::Client,
    server: &Server,
    kind: usize,
    n: u64,
    bindings: u64,
) -> u16 {
    let base = &server.url;
    let req = match kind {
        0 => http.get(format!("{base}/metrics")),
        1 => http.get(format!("{base}{DEPLOYMENTS}/app-{}", n % bindings)),
        2 => http.get(format!("{base}/apis/cluster.karmada.io/v1alpha1/clusters")),
        3 => http.get(format!("{base}/apis")),
        _ => http
            .post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .header("content-type", "application/json")
            .body(
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"generateName": "probe-", "namespace": "default"},
                       "data": {"n": n.to_string()}})
                .to_string(),
            ),
    };
    match req.bearer_auth(&server.token).send() {
        Ok(r) => {
            let status = r.status().as_u16();
            let _ = r.bytes();
            status
        }
        Err(_) => 0,
    }
}

fn main() {
    let bindings = env_or("BINDINGS", 20_000);
    let members = env_or("MEMBERS", 6);
    let clients = env_or("CLIENTS", 4);
    let rate = env_or("RATE", 10).max(1);
    let timeout = Duration::from_secs(env_or("TIMEOUT_SECONDS", 600));
    // Room on the simulated members' 3 nodes for every pod (the agent reads these).
    std::env::set_var(
        "FLOTILLA_AGENT_SIM_NODE_PODS",
        (bindings / 3 + 200).to_string(),
    );
    std::env::set_var("FLOTILLA_AGENT_SIM_NODE_CPU", "100000");
    std::env::set_var("FLOTILLA_AGENT_SIM_NODE_MEMORY", "100Ti");
    let args = server_args(members);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let saved = std::env::var_os("STATE_DIR").map(std::path::PathBuf::from);
    match &saved {
        Some(s) if s.join("store").exists() => {
            println!("state copied from {}", s.display());
            copy_dir(s, &data);
        }
        _ => {
            prepare(&data, bindings, members, &args);
            if let Some(s) = &saved {
                copy_dir(&data, s);
                println!("state saved in {}", s.display());
            }
        }
    }

    // The restart.
    let spawned = Instant::now();
    let server = Server::start(&data, &args).unwrap();
    let t0 = Instant::now();
    let listen_after = t0.duration_since(spawned).as_secs_f64();
    let pid = server.process.child.id();
    let cpu0 = cpu_seconds(pid);
    let load_before = loadavg();
    let perf = flotilla_tests::bench::perf_record(&pid.to_string());
    let stop = Arc::new(AtomicBool::new(false));
    let results: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let caught_up: Arc<Mutex<Option<f64>>> = Arc::default();
    std::thread::scope(|s| {
        let server = &server;
        for c in 0..clients {
            let (stop, results) = (stop.clone(), results.clone());
            s.spawn(move || {
                let http = http_client(server);
                let period = Duration::from_secs_f64(1.0 / rate as f64);
                // Clients start spread over one period, each in its own turn of the kinds.
                let mut due = t0 + period.mul_f64(c as f64 / clients as f64);
                let mut n = c;
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    let kind = (n % KINDS.len() as u64) as usize;
                    let status = request(&http, server, kind, n, bindings);
                    let latency = due.elapsed().as_secs_f64();
                    results.lock().unwrap().push(Sample {
                        kind: KINDS[kind],
                        due: due.duration_since(t0).as_secs_f64(),
                        latency,
                        status,
                    });
                    due += period;
                    n += 1;
                }
            });
        }
        // The monitor: /metrics every 250 ms until every controller is idle.
        let (stop, results, caught_up) = (stop.clone(), results.clone(), caught_up.clone());
        s.spawn(move || {
            let http = http_client(server);
            let mut due = t0;
            loop {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let resp = http
                    .get(format!("{}/metrics", server.url))
                    .bearer_auth(&server.token)
                    .send();
                let (status, text) = match resp {
                    Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
                    Err(_) => (0, String::new()),
                };
                let answered = t0.elapsed().as_secs_f64();
                results.lock().unwrap().push(Sample {
                    kind: KINDS[0],
                    due: due.duration_since(t0).as_secs_f64(),
                    latency: due.elapsed().as_secs_f64(),
                    status,
                });
                let work = controller_work(&samples(&text));
                if work.is_none() && status == 200 {
                    panic!("the server has no flotilla_controller_busy gauge: a build older than this benchmark");
                }
                if work == Some(0.0) {
                    *caught_up.lock().unwrap() = Some(answered);
                    break;
                }
                if t0.elapsed() > timeout {
                    break;
                }
                due += Duration::from_millis(250);
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let cpu1 = cpu_seconds(pid);
    let wall = t0.elapsed().as_secs_f64();
    flotilla_tests::bench::perf_stop(perf);

    let caught_up = *caught_up.lock().unwrap();
    let results = results.lock().unwrap();
    println!(
        "restart over {bindings} bindings and {} Works ({members} simulated members): listening {listen_after:.2} s after the spawn",
        bindings * members
    );
    match caught_up {
        Some(t) => println!(
            "**every controller queue empty {t:.1} s after listening** ({:.1} s after the spawn)",
            t + listen_after
        ),
        None => println!("NOT CAUGHT UP within {timeout:?}"),
    }
    let all: Vec<&Sample> = results.iter().collect();
    let mut sorted: Vec<f64> = all.iter().map(|s| s.latency).collect();
    sorted.sort_by(f64::total_cmp);
    println!(
        "API latency during the catch-up, from each request's due time ({clients} clients at {rate}/s each, open loop, plus the monitor's /metrics every 250 ms):"
    );
    println!("| request | requests | failed | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for kind in KINDS {
        let mut d: Vec<f64> = all
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.latency)
            .collect();
        d.sort_by(f64::total_cmp);
        let failed = all
            .iter()
            .filter(|s| s.kind == kind && !(200..300).contains(&s.status))
            .count();
        println!(
            "| {kind} | {} | {failed} | {:.3} s | {:.3} s | {:.3} s |",
            d.len(),
            percentile(&d, 0.5),
            percentile(&d, 0.99),
            percentile(&d, 1.0)
        );
    }
    println!(
        "| **all** | {} | {} | {:.3} s | **{:.3} s** | {:.3} s |",
        sorted.len(),
        all.iter()
            .filter(|s| !(200..300).contains(&s.status))
            .count(),
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        percentile(&sorted, 1.0)
    );
    // The slowest request due in each window of the catch-up: where the stalls are.
    let step = (wall / 12.0).max(1.0);
    let mut line = String::from("slowest request by when it was due:");
    let mut t = 0.0;
    while t < wall {
        let worst = all
            .iter()
            .filter(|s| s.due >= t && s.due < t + step)
            .map(|s| s.latency)
            .fold(0.0, f64::max);
        line.push_str(&format!(" {t:.0}s {worst:.2}"));
        t += step;
    }
    println!("{line}");
    println!(
        "server CPU during the catch-up: {:.1} s in {wall:.1} s ({:.0} % of one core); loadavg before {load_before}, after {}",
        cpu1 - cpu0,
        (cpu1 - cpu0) / wall * 100.0,
        loadavg()
    );
    drop(server);
}
