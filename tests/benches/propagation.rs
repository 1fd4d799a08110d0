//! Propagation benchmark (plain `main`, not a test): the time from a template+policy POST to
//! its Works applied on pull members, at a fixed open-loop rate.
//!
//! One release `flotilla-server` with `--sim-members MEMBERS` (simulated members joined in pull
//! mode through a `flotilla-agent`). Unit `i` is a PropagationPolicy `bench-i` naming Deployment
//! `app-i` and placing it Divided by static weight on two members (round robin), then that
//! Deployment (2 replicas). Unit `i` is due at `t0 + 2i / QPS`; sender threads send it at its due
//! time and the latency counts from the due time, so a sender that falls behind adds its delay
//! (no coordinated omission). A watch on every Work sees each Work's `Applied=True` condition as
//! the agent reports it; a unit's latency ends when both its Works are applied.
//!
//! Run: `cargo bench -p flotilla-tests --bench propagation`. Knobs (environment): `MEMBERS`
//! (10), `QPS` (200 POSTs per second, the goal's rate: each unit is two POSTs, so 100 units/s),
//! `SECONDS` (20), `WORKERS` (64 sender threads), `STORE` (`sled`; `memory` to compare) and
//! `FLUSH_INTERVAL_US` (the server's `--store-min-flush-interval-us`; its default when unset)
//! and `LATENCIES_CSV` (a file to write each unit's due time and latency to).
//! It prints the latency table, the per-stage table, the CPU each process spent per unit and
//! the server's counters. Figures go to docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::bench::{children, cpu_seconds, env_or};
use flotilla_tests::{wait_members_ready, ApiClient, Server};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn policy(i: u64, members: u64) -> Value {
    let a = format!("member{}", (2 * i) % members + 1);
    let b = format!("member{}", (2 * i + 1) % members + 1);
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": format!("app-{i}")}],
            "placement": {
                "clusterAffinity": {"clusterNames": [a, b]},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [
                        {"targetCluster": {"clusterNames": [a]}, "weight": 1},
                        {"targetCluster": {"clusterNames": [b]}, "weight": 1}
                    ]}
                }
            }
        }
    })
}

fn deployment(i: u64) -> Value {
    let name = format!("app-{i}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// The unit a Work belongs to (its binding is `app-<i>-deployment`).
fn unit_of(work: &Value) -> Option<u64> {
    work.pointer("/metadata/annotations/resourcebinding.karmada.io~1name")?
        .as_str()?
        .strip_prefix("app-")?
        .strip_suffix("-deployment")?
        .parse()
        .ok()
}

fn applied(work: &Value) -> bool {
    work.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Applied" && c["status"] == "True")
        })
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// When each unit reached each stage (first seen by a watch).
#[derive(Default)]
struct Stages {
    /// Its binding exists (detector).
    bound: HashMap<u64, Instant>,
    /// Its binding has clusters (scheduler).
    scheduled: HashMap<u64, Instant>,
    /// A Work exists (binding controller).
    dispatched: HashMap<u64, Instant>,
    /// Both Works report Applied (agent).
    applied: HashMap<u64, Instant>,
}

/// p50 / p99 of the time from one stage to the next, over units that reached both.
fn stage_line(name: &str, from: &HashMap<u64, Instant>, to: &HashMap<u64, Instant>) -> String {
    let mut d: Vec<f64> = to
        .iter()
        .filter_map(|(u, t)| Some(t.saturating_duration_since(*from.get(u)?).as_secs_f64()))
        .collect();
    d.sort_by(f64::total_cmp);
    format!(
        "| {name} | {:.0} ms | {:.0} ms |",
        percentile(&d, 0.5) * 1e3,
        percentile(&d, 0.99) * 1e3
    )
}

struct Observed {
    /// Works seen applied per unit (by work namespace/name).
    works: HashMap<u64, Vec<String>>,
    /// Latency per finished unit, in seconds.
    done: HashMap<u64, f64>,
}

fn http_client(server: &Server, timeout: Option<Duration>) -> reqwest::blocking::Client {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    let mut b = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
    b = b.timeout(timeout);
    b.build().unwrap()
}

fn main() {
    let members = env_or("MEMBERS", 10);
    let qps = env_or("QPS", 200);
    let seconds = env_or("SECONDS", 20);
    let workers = env_or("WORKERS", 64) as usize;
    // Units per second: each is two POSTs.
    let rate = qps as f64 / 2.0;
    let units = (rate * seconds as f64) as u64;

    // The server starts the agent from beside its own binary.
    flotilla_tests::binary("flotilla-agent").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--sim-members".to_string(),
        members.to_string(),
        "--sim-pod-startup-delay-ms".to_string(),
        "0".to_string(),
    ];
    for (var, flag) in [
        ("STORE", "--store"),
        ("FLUSH_INTERVAL_US", "--store-min-flush-interval-us"),
    ] {
        if let Ok(value) = std::env::var(var) {
            args.extend([flag.to_string(), value]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(dir.path(), &args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    wait_members_ready(&api, members as usize);
    println!("{members} pull members Ready; {units} units at {rate}/s ({qps} POSTs/s)");

    let t0_cell: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let observed = Arc::new(Mutex::new(Observed {
        works: HashMap::new(),
        done: HashMap::new(),
    }));
    let stop = Arc::new(AtomicBool::new(false));

    // Watches on bindings and Works, from a list's resourceVersion: the end of each stage.
    let list = api.get("/apis/work.karmada.io/v1alpha1/works").unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let stages = Arc::new(Mutex::new(Stages::default()));
    let watch = |kind: &'static str| {
        let http = http_client(&server, None);
        let url = format!(
            "{}/apis/work.karmada.io/{version}/{kind}?watch=true&resourceVersion={rv}",
            server.url,
            version = if kind == "works" {
                "v1alpha1"
            } else {
                "v1alpha2"
            }
        );
        let token = server.token.clone();
        let observed = observed.clone();
        let stages = stages.clone();
        let t0_cell = t0_cell.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let resp = http.get(url).bearer_auth(token).send().unwrap();
            assert!(resp.status().is_success(), "watch: {}", resp.status());
            for line in BufReader::new(resp).lines() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(line) = line else { break };
                let Ok(ev) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if ev["type"] == "ERROR" {
                    eprintln!("watch error: {ev}");
                    break;
                }
                let now = Instant::now();
                let Some(t0) = *t0_cell.lock().unwrap() else {
                    continue;
                };
                let obj = &ev["object"];
                if kind == "resourcebindings" {
                    let Some(unit) = obj["metadata"]["name"]
                        .as_str()
                        .and_then(|n| n.strip_prefix("app-")?.strip_suffix("-deployment"))
                        .and_then(|n| n.parse::<u64>().ok())
                    else {
                        continue;
                    };
                    let mut st = stages.lock().unwrap();
                    st.bound.entry(unit).or_insert(now);
                    if obj["spec"]["clusters"]
                        .as_array()
                        .is_some_and(|c| !c.is_empty())
                    {
                        st.scheduled.entry(unit).or_insert(now);
                    }
                    continue;
                }
                let Some(unit) = unit_of(obj) else {
                    continue;
                };
                stages.lock().unwrap().dispatched.entry(unit).or_insert(now);
                if !applied(obj) {
                    continue;
                }
                let name = format!(
                    "{}/{}",
                    obj["metadata"]["namespace"].as_str().unwrap_or(""),
                    obj["metadata"]["name"].as_str().unwrap_or("")
                );
                let mut o = observed.lock().unwrap();
                let seen = o.works.entry(unit).or_default();
                if !seen.contains(&name) {
                    seen.push(name);
                }
                if seen.len() >= 2 && !o.done.contains_key(&unit) {
                    let due = t0 + Duration::from_secs_f64(unit as f64 / rate);
                    o.done
                        .insert(unit, now.saturating_duration_since(due).as_secs_f64());
                    stages.lock().unwrap().applied.insert(unit, now);
                }
            }
        })
    };
    let watchers = [watch("works"), watch("resourcebindings")];

    let pid = server.process.child.id();
    let agents = children(pid);
    let agent_cpu = || agents.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let cpu0 = cpu_seconds(pid);
    let agent_cpu0 = agent_cpu();
    let own_cpu0 = cpu_seconds(std::process::id());
    let next = AtomicU64::new(0);
    let late = AtomicUsize::new(0);
    let errors = AtomicUsize::new(0);
    let t0 = Instant::now() + Duration::from_millis(200);
    *t0_cell.lock().unwrap() = Some(t0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= units {
                    break;
                }
                let due = t0 + Duration::from_secs_f64(i as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                } else if now - due > Duration::from_millis(50) {
                    late.fetch_add(1, Ordering::Relaxed);
                }
                for (path, body) in [
                    (
                        "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
                        policy(i, members),
                    ),
                    (
                        "/apis/apps/v1/namespaces/default/deployments",
                        deployment(i),
                    ),
                ] {
                    match api.send("POST", path, Some(&body)) {
                        Ok((code, _)) if (200..300).contains(&code) => {}
                        Ok((code, v)) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("POST {path} answered {code}: {v}");
                            }
                        }
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("POST {path} failed: {e:#}");
                            }
                        }
                    }
                }
            });
        }
    });
    let sent_in = t0.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if observed.lock().unwrap().done.len() as u64 >= units {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let cpu = cpu_seconds(pid) - cpu0;
    let agent_cpu = agent_cpu() - agent_cpu0;
    let own_cpu = cpu_seconds(std::process::id()) - own_cpu0;
    let wall = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);

    // Each unit's due time and latency, to see when the slow ones happened.
    if let Ok(path) = std::env::var("LATENCIES_CSV") {
        let o = observed.lock().unwrap();
        let mut rows: Vec<(f64, f64)> = o
            .done
            .iter()
            .map(|(u, l)| (*u as f64 / rate, l * 1e3))
            .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let csv: String = rows
            .iter()
            .map(|(due, ms)| format!("{due:.3},{ms:.1}\n"))
            .collect();
        std::fs::write(&path, format!("due_s,latency_ms\n{csv}")).unwrap();
    }
    let mut lat: Vec<f64> = observed.lock().unwrap().done.values().copied().collect();
    lat.sort_by(f64::total_cmp);
    let ms = |q: f64| percentile(&lat, q) * 1e3;
    println!(
        "sent {units} units in {sent_in:.1} s ({:.0}/s), {} late by > 50 ms, {} errors; {} of {units} fully applied",
        units as f64 / sent_in,
        late.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        lat.len()
    );
    println!("| members | QPS (units/s) | units | p50 | p90 | p99 | max | server CPU |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {members} | {qps} ({rate}/s) | {units} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} % of one core |",
        ms(0.50),
        ms(0.90),
        ms(0.99),
        ms(1.0),
        cpu / wall * 100.0
    );
    println!(
        "CPU per unit: server {:.2} ms, agent {:.2} ms ({:.0} % of one core), this load generator {:.2} ms ({:.0} % of one core)",
        cpu / units as f64 * 1e3,
        agent_cpu / units as f64 * 1e3,
        agent_cpu / wall * 100.0,
        own_cpu / units as f64 * 1e3,
        own_cpu / wall * 100.0
    );
    {
        let st = stages.lock().unwrap();
        let due: HashMap<u64, Instant> = (0..units)
            .map(|u| (u, t0 + Duration::from_secs_f64(u as f64 / rate)))
            .collect();
        println!("| stage | p50 | p99 |\n|---|---|---|");
        println!(
            "{}",
            stage_line("due → binding (detector)", &due, &st.bound)
        );
        println!(
            "{}",
            stage_line("binding → clusters (scheduler)", &st.bound, &st.scheduled)
        );
        println!(
            "{}",
            stage_line(
                "clusters → Work (binding controller)",
                &st.scheduled,
                &st.dispatched
            )
        );
        println!(
            "{}",
            stage_line("Work → both applied (agent)", &st.dispatched, &st.applied)
        );
    }
    let metrics = http_client(&server, Some(Duration::from_secs(30)))
        .get(format!("{}/metrics", server.url))
        .bearer_auth(&server.token)
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    for line in metrics.lines().filter(|l| {
        l.starts_with("flotilla_controller_reconciles_total")
            || l.starts_with("flotilla_store_")
            || l.starts_with("flotilla_controller_queue_depth")
            || l.starts_with("flotilla_apiserver_requests_total")
    }) {
        println!("  {line}");
    }
    // The watch thread ends with the server.
    drop(server);
    for w in watchers {
        let _ = w.join();
    }
}
