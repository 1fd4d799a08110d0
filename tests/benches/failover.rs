//! Failover benchmark (plain `main`, not a test): 1,000 bindings on one member that is killed,
//! tolerations of 0 s, at the server's default eviction brake (it lets the failed cluster out
//! at once, then all its bindings go; `BRAKE=off` adds `--enable-eviction-rate-limit=false`,
//! the figure with pacing off). It measures the time from the moment the
//! NoExecute taint appears on the dead member to the moment every binding reports all its
//! replicas Healthy on the other members, and the phases in between.
//!
//! One release `flotilla-server` (sled store in a temp dir, HTTPS on 127.0.0.1,
//! `--fast-failover`: second-scale cluster monitoring, default tolerations of 0 s) and three
//! `flotilla-agent` processes, one per simulated member (member1..member3), joined in pull mode.
//! One PropagationPolicy selects every Deployment `app-<i>` (label `bench=failover`) with
//! cluster affinity member1..member3 and Divided static weights naming member1 alone: while
//! member1 is Ready it holds every replica (clusters no rule names weigh 0); once member1 is
//! evicted no rule matches the remaining clusters, so each weighs 1 and the replicas divide
//! 1:1 over member2 and member3. Every replica of every binding must move, and the new Works
//! are new objects on members that had none of them, so no stale status can read as Healthy.
//!
//! When all bindings are Healthy on member1, member1's agent is SIGKILLed. Its lease stops,
//! Ready turns Unknown after `--cluster-monitor-grace-period`, and the NoExecute taint follows
//! after `--failover-eviction-timeout`; those detection delays are flags and are not part of
//! the figure. Watches on Clusters, ResourceBindings and Works stamp, per binding, when it was
//! evicted (member1 left `spec.clusters`), rescheduled (`spec.clusters` is member2+member3),
//! got both new Works, had both applied by the agents, and reported both Healthy in
//! `status.aggregatedStatus`; then when its eviction task ended (the old copy released).
//!
//! Run: `cargo bench -p flotilla-tests --bench failover`. Knobs (environment):
//! `FAILOVER_BINDINGS` (1000), `REPLICAS` per Deployment (2), `POD_STARTUP_MS` (the simulated
//! pods' startup delay, 0: the figure is the control plane's), `BRAKE` (`default`; `off`: no
//! pacing), `STORE` (`sled`; `log` or `memory` to
//! compare; `etcd` starts an etcd of `ETCD_MEMBERS` members, 3, on 127.0.0.1), `SERVER_ARGS` (more server flags, split on whitespace), `PERF_RECORD` (a file:
//! `perf record --call-graph dwarf` of the server from the taint to the end; with
//! `PERF_AGENTS=1` the surviving agents too). It prints the figure, the per-stage table, the
//! CPU spent and the server's counters during the failover. Figures go to docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_server::testing::etcd::EtcdCluster;
use flotilla_tests::bench::{cpu_seconds, env_or};
use flotilla_tests::{eventually, wait_members_ready, Agent, ApiClient, Server};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEAD: &str = "member1";
const NEW: [&str; 2] = ["member2", "member3"];
const RBS: &str = "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings";

fn policy() -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "bench-failover", "namespace": "default"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                   "labelSelector": {"matchLabels": {"bench": "failover"}}}],
            "placement": {
                "clusterAffinity": {"clusterNames": ["member1", "member2", "member3"]},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [
                        {"targetCluster": {"clusterNames": ["member1"]}, "weight": 1}
                    ]}
                }
            }
        }
    })
}

fn deployment(i: u64, replicas: u64) -> Value {
    let name = format!("app-{i}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": "failover"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// The binding index of a binding named `app-<i>-deployment`.
fn index_of_binding(name: &str) -> Option<u64> {
    name.strip_prefix("app-")?
        .strip_suffix("-deployment")?
        .parse()
        .ok()
}

/// What the benchmark reads of a watched object: only these fields are decoded (the rest is
/// skipped), so its watches cost the machine little of what they measure.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Observed {
    metadata: ObservedMeta,
    spec: ObservedSpec,
    status: ObservedStatus,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ObservedMeta {
    name: String,
    namespace: String,
    annotations: ObservedAnnotations,
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObservedAnnotations {
    #[serde(rename = "resourcebinding.karmada.io/name")]
    binding: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ObservedSpec {
    /// A binding's placement.
    clusters: Vec<Named>,
    graceful_eviction_tasks: Vec<serde::de::IgnoredAny>,
    /// A Cluster's taints.
    taints: Vec<Taint>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ObservedStatus {
    /// A binding's per-cluster health.
    aggregated_status: Vec<ClusterHealth>,
    /// A Work's or a Cluster's conditions.
    conditions: Vec<Condition>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Named {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Taint {
    effect: String,
    time_added: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ClusterHealth {
    cluster_name: String,
    health: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// One line of a watch stream, decoded as [`Observed`].
#[derive(Deserialize)]
struct ObservedEvent {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    object: Observed,
}

fn cluster_names(rb: &Value) -> Vec<String> {
    rb["spec"]["clusters"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every cluster of `spec.clusters` reports Healthy for this binding.
fn healthy_everywhere(rb: &Value, clusters: &[String]) -> bool {
    let items = rb["status"]["aggregatedStatus"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    !clusters.is_empty()
        && clusters.iter().all(|c| {
            items
                .iter()
                .any(|i| i["clusterName"] == c.as_str() && i["health"] == "Healthy")
        })
}

/// [`healthy_everywhere`] of a watched binding.
fn observed_healthy_everywhere(rb: &Observed, clusters: &[&str]) -> bool {
    !clusters.is_empty()
        && clusters.iter().all(|c| {
            rb.status
                .aggregated_status
                .iter()
                .any(|i| i.cluster_name == *c && i.health == "Healthy")
        })
}

fn is_new_placement(clusters: &[&str]) -> bool {
    clusters.len() == NEW.len() && NEW.iter().all(|n| clusters.contains(n))
}

fn has_no_execute_taint(cluster: &Observed) -> Option<String> {
    cluster
        .spec
        .taints
        .iter()
        .find(|t| t.effect == "NoExecute")
        .map(|t| t.time_added.clone())
}

fn applied(work: &Observed) -> bool {
    work.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Applied" && c.status == "True")
}

/// When each binding reached each stage, as the watches saw it.
#[derive(Default)]
struct Stages {
    /// The NoExecute taint on member1 (instant seen, wall clock seen, its timeAdded).
    taint: Option<(Instant, chrono::DateTime<chrono::Utc>, String)>,
    /// A surviving member seen not Ready (its lease or status fell behind under the load):
    /// which, and when.
    survivor_not_ready: Vec<(String, Instant)>,
    /// member1 left `spec.clusters`.
    evicted: HashMap<u64, Instant>,
    /// `spec.clusters` is member2 + member3.
    rescheduled: HashMap<u64, Instant>,
    /// New Works seen per binding (cluster → applied).
    works: HashMap<u64, HashMap<String, bool>>,
    /// Both new Works exist.
    dispatched: HashMap<u64, Instant>,
    /// Both new Works report Applied.
    applied: HashMap<u64, Instant>,
    /// Every cluster of the new placement reports Healthy.
    healthy: HashMap<u64, Instant>,
    /// The binding had an eviction task.
    had_task: HashMap<u64, Instant>,
    /// Its eviction task ended (member1's copy released).
    task_done: HashMap<u64, Instant>,
    /// Watch events of the benchmark's bindings and of their Works, from the kill on.
    binding_events: u64,
    work_events: u64,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn http_client(server: &Server, timeout: Option<Duration>) -> reqwest::blocking::Client {
    let pem = std::fs::read(server.data_dir.join("tls.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .timeout(timeout)
        .build()
        .unwrap()
}

/// A pull agent for one simulated member, with room for every replica of the benchmark.
fn member(server: &Server, name: &str, data: &Path, pods: u64, startup_ms: u64) -> Agent {
    let dir = data.join(name).display().to_string();
    let ca = server.data_dir.join("tls.crt").display().to_string();
    let token = server.data_dir.join("join.token").display().to_string();
    let nodes = 4;
    let pods_per_node = (pods / nodes + 110).to_string();
    let startup_ms = startup_ms.to_string();
    Agent::start(&[
        "--server",
        &server.url,
        "--cluster-name",
        name,
        "--token-file",
        &token,
        "--ca-file",
        &ca,
        "--data-dir",
        &dir,
        "--lease-renew-interval-ms",
        "300",
        "--cluster-status-update-frequency-ms",
        "1000",
        "--pod-startup-delay-ms",
        &startup_ms,
        "--sim-nodes",
        &nodes.to_string(),
        "--sim-node-pods",
        &pods_per_node,
        "--sim-node-cpu",
        "1000",
        "--sim-node-memory",
        "4Ti",
    ])
    .expect("starting flotilla-agent")
}

/// Busy, total and stolen jiffies of the whole machine (`/proc/stat`), to tell how loaded it
/// was. Busy counts steal: time the hypervisor gave this machine's cores to someone else.
fn machine_jiffies() -> (f64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().next() else {
        return (0.0, 0.0, 0.0);
    };
    let v: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    let steal = v.get(7).copied().unwrap_or(0.0);
    (total - idle, total, steal)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The server's Prometheus samples (`name{labels}` → value).
fn scrape(server: &Server) -> HashMap<String, f64> {
    let text = http_client(server, Some(Duration::from_secs(30)))
        .get(format!("{}/metrics", server.url))
        .bearer_auth(&server.token)
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Watches `path` from `rv` in a thread, handing each event's object to `on`.
fn watch(
    server: &Server,
    path: &str,
    rv: &str,
    stop: Arc<AtomicBool>,
    mut on: impl FnMut(&Observed, Instant) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let http = http_client(server, None);
    let url = format!("{}{path}?watch=true&resourceVersion={rv}", server.url);
    let token = server.token.clone();
    std::thread::spawn(move || {
        let resp = http.get(url).bearer_auth(token).send().unwrap();
        assert!(resp.status().is_success(), "watch: {}", resp.status());
        for line in BufReader::new(resp).lines() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(line) = line else { break };
            let now = Instant::now();
            let ev: ObservedEvent = match serde_json::from_str(&line) {
                Ok(ev) => ev,
                Err(e) => {
                    eprintln!("watch: undecodable event ({e}): {line}");
                    break;
                }
            };
            if ev.type_ == "ERROR" {
                eprintln!("watch error: {line}");
                break;
            }
            on(&ev.object, now);
        }
    })
}

fn main() {
    let n = env_or("FAILOVER_BINDINGS", 1000);
    let replicas = env_or("REPLICAS", 2);
    let startup_ms = env_or("POD_STARTUP_MS", 0);

    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["--fast-failover", "--cluster-startup-grace-period", "10s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let brake = std::env::var("BRAKE").unwrap_or_else(|_| "default".into());
    match brake.as_str() {
        "default" => {}
        // Pacing off: the eviction brake paces nothing (its stops stay).
        "off" => args.push("--enable-eviction-rate-limit=false".into()),
        other => panic!("BRAKE={other}: expected default or off"),
    }
    println!("eviction brake: {brake}");
    // STORE=etcd: an etcd cluster of ETCD_MEMBERS members (3) on 127.0.0.1, from Debian's
    // package, kept until the end of the run.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut _etcd = None;
    if let Ok(store) = std::env::var("STORE") {
        if store == "etcd" {
            let members = env_or("ETCD_MEMBERS", 3) as usize;
            let cluster = runtime.block_on(EtcdCluster::start(members)).unwrap();
            args.extend([
                "--etcd-endpoints".to_string(),
                cluster.endpoints().join(","),
            ]);
            println!("store: etcd, {members} member(s)");
            _etcd = Some(cluster);
        }
        args.extend(["--store".to_string(), store]);
    }
    // SERVER_ARGS: more flags for the server, split on whitespace (to try a setting).
    if let Ok(extra) = std::env::var("SERVER_ARGS") {
        args.extend(extra.split_whitespace().map(str::to_string));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&dir.path().join("server"), &args).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let pods = n * replicas;
    let mut agents: Vec<Agent> = ["member1", "member2", "member3"]
        .iter()
        .map(|m| member(&server, m, dir.path(), pods, startup_ms))
        .collect();
    wait_members_ready(&api, 3);

    // The policy, then the Deployments from a few threads.
    let started = Instant::now();
    let (code, body) = api
        .send(
            "POST",
            "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
            Some(&policy()),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    flotilla_tests::bench::post_deployments(&api, n, |i| deployment(i, replicas));
    let settle = Duration::from_secs(60 + n / 5);
    eventually(&format!("{n} bindings Healthy on member1"), settle, || {
        let list = api.get(RBS).ok()?;
        let items = list["items"].as_array()?;
        let ok = items
            .iter()
            .filter(|rb| cluster_names(rb) == [DEAD] && healthy_everywhere(rb, &cluster_names(rb)))
            .count() as u64;
        (ok == n).then_some(())
    });
    println!(
        "{n} Deployments ({replicas} replicas each, pod startup {startup_ms} ms) Healthy on {DEAD} after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Watches from now on: the taint, the bindings, the Works.
    let list = api
        .get("/apis/cluster.karmada.io/v1alpha1/clusters")
        .unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let stages = Arc::new(Mutex::new(Stages::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let watchers = [
        {
            let stages = stages.clone();
            watch(
                &server,
                "/apis/cluster.karmada.io/v1alpha1/clusters",
                &rv,
                stop.clone(),
                move |c, now| {
                    if c.metadata.name != DEAD {
                        let ready = c
                            .status
                            .conditions
                            .iter()
                            .any(|k| k.type_ == "Ready" && k.status == "True");
                        if !ready {
                            let mut st = stages.lock().unwrap();
                            st.survivor_not_ready.push((c.metadata.name.clone(), now));
                        }
                        return;
                    }
                    if let Some(added) = has_no_execute_taint(c) {
                        let mut st = stages.lock().unwrap();
                        if st.taint.is_none() {
                            st.taint = Some((now, chrono::Utc::now(), added));
                        }
                    }
                },
            )
        },
        {
            let stages = stages.clone();
            watch(&server, RBS, &rv, stop.clone(), move |rb, now| {
                let Some(i) = index_of_binding(&rb.metadata.name) else {
                    return;
                };
                let clusters: Vec<&str> =
                    rb.spec.clusters.iter().map(|c| c.name.as_str()).collect();
                let tasks = rb.spec.graceful_eviction_tasks.len();
                // Before the kill every binding lists member1 and has no task, so nothing
                // here is stamped early; nor does it wait for the Cluster watch's thread.
                let mut st = stages.lock().unwrap();
                st.binding_events += 1;
                if tasks > 0 {
                    st.had_task.entry(i).or_insert(now);
                } else if st.had_task.contains_key(&i) {
                    st.task_done.entry(i).or_insert(now);
                }
                if clusters.contains(&DEAD) {
                    return;
                }
                st.evicted.entry(i).or_insert(now);
                if is_new_placement(&clusters) {
                    st.rescheduled.entry(i).or_insert(now);
                    if observed_healthy_everywhere(rb, &clusters) {
                        st.healthy.entry(i).or_insert(now);
                    }
                }
            })
        },
        {
            let stages = stages.clone();
            watch(
                &server,
                "/apis/work.karmada.io/v1alpha1/works",
                &rv,
                stop.clone(),
                move |w, now| {
                    let Some(i) = w
                        .metadata
                        .annotations
                        .binding
                        .as_deref()
                        .and_then(index_of_binding)
                    else {
                        return;
                    };
                    let Some(cluster) = w.metadata.namespace.strip_prefix("karmada-es-") else {
                        return;
                    };
                    stages.lock().unwrap().work_events += 1;
                    if !NEW.contains(&cluster) || w.metadata.deletion_timestamp.is_some() {
                        return;
                    }
                    let mut st = stages.lock().unwrap();
                    let seen = st.works.entry(i).or_default();
                    let ok = applied(w) || seen.get(cluster).copied().unwrap_or(false);
                    seen.insert(cluster.to_string(), ok);
                    let (all, all_applied) = (seen.len() == NEW.len(), seen.values().all(|a| *a));
                    if all {
                        st.dispatched.entry(i).or_insert(now);
                        if all_applied {
                            st.applied.entry(i).or_insert(now);
                        }
                    }
                },
            )
        },
    ];

    let pid = server.process.child.id();
    let survivors: Vec<u32> = agents[1..].iter().map(|a| a.process.child.id()).collect();
    let agents_cpu = || survivors.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let load_before = loadavg();
    let before = scrape(&server);

    // Kill member1 and wait for the taint.
    let killed = Instant::now();
    agents[0].process.kill();
    let t0 = eventually(
        "the NoExecute taint on member1",
        Duration::from_secs(60),
        || stages.lock().unwrap().taint.as_ref().map(|t| t.0),
    );
    let me = std::process::id();
    let (cpu0, agents0, machine0) = (cpu_seconds(pid), agents_cpu(), machine_jiffies());
    let bench0 = cpu_seconds(me);
    // PERF_RECORD=<file>: a `perf record` (DWARF call graphs) of the server from the taint to
    // the end; PERF_AGENTS=1 records the surviving agents as well.
    let mut perf_pids = pid.to_string();
    if std::env::var("PERF_AGENTS").is_ok_and(|v| v == "1") {
        for p in &survivors {
            perf_pids.push_str(&format!(",{p}"));
        }
    }
    let perf = flotilla_tests::bench::perf_record(&perf_pids);
    let done = flotilla_tests::bench::until(
        "every binding Healthy on member2 and member3",
        Duration::from_secs(600),
        || {
            let st = stages.lock().unwrap();
            (st.healthy.len() as u64 >= n)
                .then(|| st.healthy.values().max().copied())
                .flatten()
        },
    );
    let end = Instant::now();
    let (cpu1, agents1, machine1) = (cpu_seconds(pid), agents_cpu(), machine_jiffies());
    let bench1 = cpu_seconds(me);
    flotilla_tests::bench::perf_stop(perf);
    // The old copies are released after the new ones are Healthy; wait for that too (not
    // part of the figure).
    let _ = flotilla_tests::bench::until(
        "every eviction task to end",
        Duration::from_secs(60),
        || (stages.lock().unwrap().task_done.len() as u64 >= n).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);

    let st = stages.lock().unwrap();
    let (_, taint_seen_wall, time_added) = st.taint.clone().unwrap();
    println!(
        "member1 killed; NoExecute taint seen {:.2} s later (timeAdded {time_added}, seen at {})",
        t0.duration_since(killed).as_secs_f64(),
        taint_seen_wall.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    let wall = end.duration_since(t0).as_secs_f64();
    for (cluster, at) in &st.survivor_not_ready {
        let since = if *at >= t0 {
            at.duration_since(t0).as_secs_f64()
        } else {
            -t0.duration_since(*at).as_secs_f64()
        };
        println!("WARNING: surviving {cluster} seen not Ready {since:+.2} s from the taint");
    }
    match &done {
        Ok(last) => println!(
            "**taint → every replica Healthy on member2+member3: {:.2} s** ({n} bindings, {} replicas moved)",
            last.duration_since(t0).as_secs_f64(),
            n * replicas
        ),
        Err(e) => println!(
            "NOT DONE: {e:#}; Healthy {} of {n} after {wall:.1} s",
            st.healthy.len()
        ),
    }
    let since = |m: &HashMap<u64, Instant>| -> Vec<f64> {
        let mut d: Vec<f64> = m
            .values()
            .map(|t| t.saturating_duration_since(t0).as_secs_f64())
            .collect();
        d.sort_by(f64::total_cmp);
        d
    };
    println!("| stage (time since the taint) | bindings | p50 | p99 | last |");
    println!("|---|---|---|---|---|");
    for (name, m) in [
        ("evicted (member1 left spec.clusters)", &st.evicted),
        ("rescheduled (member2 + member3)", &st.rescheduled),
        ("both new Works exist", &st.dispatched),
        ("both new Works applied", &st.applied),
        ("Healthy on member2 and member3", &st.healthy),
        ("eviction task ended (old copy released)", &st.task_done),
    ] {
        let d = since(m);
        println!(
            "| {name} | {} | {:.2} s | {:.2} s | {:.2} s |",
            d.len(),
            percentile(&d, 0.5),
            percentile(&d, 0.99),
            percentile(&d, 1.0)
        );
    }
    let jiffies = (machine1.1 - machine0.1).max(1.0);
    let busy = (machine1.0 - machine0.0) / jiffies;
    let stolen = (machine1.2 - machine0.2) / jiffies;
    println!(
        "CPU from the taint to the last Healthy ({wall:.2} s): server {:.2} s ({:.0} % of one core), surviving agents {:.2} s, this benchmark's watches {:.2} s; machine {:.0} % busy over {} cores ({:.0} % stolen by the host); loadavg before {load_before}, after {}",
        cpu1 - cpu0,
        (cpu1 - cpu0) / wall * 100.0,
        agents1 - agents0,
        bench1 - bench0,
        busy * 100.0,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        stolen * 100.0,
        loadavg()
    );
    println!(
        "watch events from the kill to the end: {} of the bindings, {} of their Works",
        st.binding_events, st.work_events
    );
    drop(st);
    // What the server did for the failover: counters from just before the kill to the end.
    let after = scrape(&server);
    let mut lines: Vec<(&String, f64)> = after
        .iter()
        .filter(|(k, _)| {
            [
                "flotilla_controller_reconciles_total",
                "flotilla_apiserver_requests_total",
                "flotilla_store_",
                "flotilla_events_total",
                "flotilla_evictions_total",
                "flotilla_eviction_tasks_dropped_total",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                && !k.contains("_bucket")
        })
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect();
    lines.sort_by(|a, b| a.0.cmp(b.0));
    println!("server counters during the failover (from the kill to the last task ended):");
    for (k, d) in lines {
        println!("  {k} +{d}");
    }
    drop(agents);
    drop(server);
    for w in watchers {
        let _ = w.join();
    }
}
