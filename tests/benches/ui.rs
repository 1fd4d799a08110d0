//! Fleet page benchmark (plain `main`, not a test): the page at `/ui` (docs/ui.md) in a real
//! headless Chromium ([`flotilla_tests::browser`]) over a large fleet. It reports:
//!
//! - the time from pressing "Log in" to the first render (the first page of every list drawn:
//!   members, the matrix's first page, the activity); goal ≤ 2 s; and until every list is in;
//! - the time from the API having a member's failure (this benchmark's own watch on Clusters
//!   sees its Ready condition leave True) to the page drawing it; goal ≤ 1 s;
//! - the longest redraw and the longest main-thread task (`longtask`) meanwhile, which say
//!   whether the tab froze.
//!
//! One release `flotilla-server` (sled store in a temp dir, HTTPS on 127.0.0.1, every flag at
//! its default but `--max-connections 4096`: each simulated member holds a connection) and one `flotilla-agent --sim-members N` (`MEMBERS`, 1,000) joined in pull
//! mode. `BINDINGS` (10,000) Deployments of 2 replicas, in 100 groups; group k's
//! PropagationPolicy divides its replicas over the ten members 10k+1..10k+10, so every member
//! holds about 20 bindings. The failure is the member holding most, made Unhealthy through the
//! simulated member's fault API: its agent reports Ready False at once.
//!
//! Run: `cargo bench -p flotilla-tests --bench ui` (`MEMBERS=100 BINDINGS=1000` for a quick
//! look). Figures go to docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::bench::{env_or, post_deployments, sim_members_agent};
use flotilla_tests::browser::Browser;
use flotilla_tests::{eventually, member_call, ApiClient, Server};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const GROUPS: u64 = 100;
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const RBS: &str = "/apis/work.karmada.io/v1alpha2/resourcebindings";

fn policy(group: u64, members: u64) -> Value {
    let per = (members / GROUPS).max(1);
    let names: Vec<String> = (0..per)
        .map(|j| format!("member{}", (group * per + j) % members + 1))
        .collect();
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": format!("group-{group}"), "namespace": "default"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                   "labelSelector": {"matchLabels": {"group": format!("g{group}")}}}],
            "placement": {
                "clusterAffinity": {"clusterNames": names},
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                                      "replicaDivisionPreference": "Weighted"}
            }
        }
    })
}

fn deployment(i: u64) -> Value {
    let name = format!("app-{i}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"group": format!("g{}", i % GROUPS)}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "app", "image": "nginx",
                                                  "resources": {"requests": {"cpu": "10m"}}}]}}
        }
    })
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn ready_status(cluster: &Value) -> Option<&str> {
    cluster["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
}

/// Watches Clusters from `rv` and stamps (wall clock, ms) the first event that shows `member`
/// with Ready other than True.
fn stamp_not_ready(server: &Server, rv: &str, member: &str) -> Arc<Mutex<Option<f64>>> {
    let seen = Arc::new(Mutex::new(None));
    let http = reqwest::blocking::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(
                &std::fs::read(server.data_dir.join("tls.crt")).unwrap(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let url = format!("{}{CLUSTERS}?watch=true&resourceVersion={rv}", server.url);
    let (token, member, out) = (server.token.clone(), member.to_string(), seen.clone());
    std::thread::spawn(move || {
        let resp = http.get(url).bearer_auth(token).send().unwrap();
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { break };
            let at = now_ms();
            // Only the failing member's events are decoded, so this watch keeps up as the
            // page's does.
            if !line.contains(&format!("\"name\":\"{member}\"")) {
                continue;
            }
            let ev: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let c = &ev["object"];
            if c["metadata"]["name"] == member.as_str() && ready_status(c) != Some("True") {
                out.lock().unwrap().get_or_insert(at);
                break;
            }
        }
    });
    seen
}

fn main() {
    let members = env_or("MEMBERS", 1000);
    let bindings = env_or("BINDINGS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = tempfile::tempdir().unwrap();
    // A thousand simulated members hold a connection each (their Works watches), beside the
    // benchmark's writers and the browser: more than the default 1,024.
    let server = Server::start(dir.path(), &["--max-connections", "4096"]).unwrap();
    let api = ApiClient::admin(&server).unwrap();
    let agent = sim_members_agent(&server, agent_dir.path(), members, &[]);
    let started = Instant::now();
    eventually("every member Ready", Duration::from_secs(600), || {
        let list = api.get(CLUSTERS).ok()?;
        let ready = list["items"]
            .as_array()?
            .iter()
            .filter(|c| ready_status(c) == Some("True"))
            .count() as u64;
        (ready == members).then_some(())
    });
    println!(
        "{members} members Ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The policies, then the Deployments from a few threads.
    let started = Instant::now();
    for g in 0..GROUPS {
        let (code, body) = api
            .send(
                "POST",
                "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies",
                Some(&policy(g, members)),
            )
            .unwrap();
        assert_eq!(code, 201, "{body}");
    }
    post_deployments(&api, bindings, deployment);
    // Every binding placed; the member holding most of them is the one that fails.
    let victim = eventually(
        &format!("{bindings} bindings placed"),
        Duration::from_secs(600 + bindings / 10),
        || {
            let list = api.get(RBS).ok()?;
            let items = list["items"].as_array()?;
            let placed: Vec<&Value> = items
                .iter()
                .filter(|rb| {
                    rb["spec"]["clusters"]
                        .as_array()
                        .is_some_and(|c| !c.is_empty())
                })
                .collect();
            if (placed.len() as u64) < bindings {
                std::thread::sleep(Duration::from_secs(2));
                return None;
            }
            let mut count = std::collections::BTreeMap::<String, u64>::new();
            for rb in placed {
                for c in rb["spec"]["clusters"].as_array().into_iter().flatten() {
                    *count
                        .entry(c["name"].as_str().unwrap_or("").to_string())
                        .or_default() += 1;
                }
            }
            count.into_iter().max_by_key(|(_, n)| *n)
        },
    );
    println!(
        "{bindings} bindings placed after {:.1} s; {} holds {} of them",
        started.elapsed().as_secs_f64(),
        victim.0,
        victim.1
    );
    let victim = victim.0;

    // What the page's three lists cost the server and the wire, read by a client beside it.
    for path in [CLUSTERS, RBS, "/api/v1/events?limit=1000"] {
        let t = Instant::now();
        let (code, body) = api.send("GET", path, None).unwrap();
        assert_eq!(code, 200);
        println!(
            "GET {path}: {} items, {:.0} ms, {:.1} MB",
            body["items"].as_array().map_or(0, Vec::len),
            t.elapsed().as_secs_f64() * 1e3,
            body.to_string().len() as f64 / 1e6
        );
    }

    // The page: log in and wait for the first full render.
    let browser = Browser::start(&["--ignore-certificate-errors"]).unwrap();
    browser.goto(&format!("{}/ui", server.url)).unwrap();
    browser
        .execute(
            "window.__longest = 0; \
             new PerformanceObserver((l) => { for (const e of l.getEntries()) \
               window.__longest = Math.max(window.__longest, e.duration); }) \
               .observe({type: 'longtask', buffered: true}); \
             window.__t0 = performance.now(); \
             document.querySelector('#token').value = arguments[0]; \
             document.querySelector('#login-button').click(); return true;",
            vec![json!(server.token)],
        )
        .unwrap();
    let first = browser
        .wait_for(
            "the first full render",
            Duration::from_secs(120),
            "const u = window.__flotillaUi; \
             return u && u.firstRenderAt !== null ? u.firstRenderAt - window.__t0 : null;",
        )
        .unwrap();
    let drawn = browser
        .execute(
            "return [document.querySelectorAll('#members tr[data-cluster]').length, \
                     document.querySelectorAll('#matrix td[data-binding]').length];",
            vec![],
        )
        .unwrap();
    let listed = browser
        .wait_for(
            "every list complete",
            Duration::from_secs(120),
            "const u = window.__flotillaUi; \
             return u && u.listedAt !== null ? u.listedAt - window.__t0 : null;",
        )
        .unwrap();
    let load = browser
        .execute(
            "return [window.__longest, window.__flotillaUi.longestRenderMs];",
            vec![],
        )
        .unwrap();
    let drawn = [
        drawn[0].clone(),
        drawn[1].clone(),
        load[0].clone(),
        load[1].clone(),
    ];
    println!(
        "first render {:.0} ms after the login (goal 2,000 ms): {} member rows and {} matrix cells drawn; every list complete after {:.0} ms; longest task {:.0} ms, longest redraw {:.0} ms",
        first.as_f64().unwrap(),
        drawn[0],
        drawn[1],
        listed.as_f64().unwrap(),
        drawn[2].as_f64().unwrap_or(0.0),
        drawn[3].as_f64().unwrap_or(0.0)
    );
    // Where the first render's time went: each list request as the browser timed it.
    let lists = browser
        .execute(
            "return performance.getEntriesByType('resource')                .filter(e => !e.name.includes('watch=true') && !e.name.endsWith('/ui'))                .map(e => [e.name.replace(location.origin, ''), e.startTime - window.__t0,                           e.responseStart - e.startTime, e.responseEnd - e.responseStart, e.decodedBodySize]);",
            vec![],
        )
        .unwrap();
    for l in lists.as_array().into_iter().flatten() {
        println!(
            "  the page's {}: asked at +{:.0} ms, first byte after {:.0} ms, body {:.0} ms, {:.1} MB",
            l[0].as_str().unwrap_or(""),
            l[1].as_f64().unwrap_or(0.0),
            l[2].as_f64().unwrap_or(0.0),
            l[3].as_f64().unwrap_or(0.0),
            l[4].as_f64().unwrap_or(0.0) / 1e6
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    browser
        .execute(
            "window.__longest = 0; window.__flotillaUi.longestRenderMs = 0; return true;",
            vec![],
        )
        .unwrap();

    // The failure: the victim reports Ready False at once.
    let rv = api.get(CLUSTERS).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let api_seen = stamp_not_ready(&server, &rv, &victim);
    let url = format!("{}/members/{victim}/faults/unhealthy", agent.url);
    match member_call("POST", &url, Some(&json!({"enabled": true}))) {
        Ok((200, _)) => {}
        other => panic!("the unhealthy fault on {victim}: {other:?}"),
    }
    let shown = browser
        .wait_for(
            &format!("{victim} not Ready"),
            Duration::from_secs(120),
            &format!(
                "const s = window.__flotillaUi.shown['{victim}']; \
                 return s && s.ready !== 'Ready' ? s.at : null;"
            ),
        )
        .unwrap()
        .as_f64()
        .unwrap();
    let api_at = eventually(
        "the benchmark's watch to see it",
        Duration::from_secs(60),
        || *api_seen.lock().unwrap(),
    );
    let after = browser
        .execute(
            "return [window.__longest, window.__flotillaUi.longestRenderMs, window.__flotillaUi.renders];",
            vec![],
        )
        .unwrap();
    println!(
        "{victim} not Ready: on the page {:.0} ms after the API had it (goal 1,000 ms); longest task meanwhile {:.0} ms, longest redraw {:.0} ms",
        shown - api_at,
        after[0].as_f64().unwrap_or(0.0),
        after[1].as_f64().unwrap_or(0.0)
    );
    println!(
        "| members | bindings | first render | every list in | failure → shown | longest task | longest redraw |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {members} | {bindings} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
        first.as_f64().unwrap(),
        listed.as_f64().unwrap(),
        shown - api_at,
        drawn[2]
            .as_f64()
            .unwrap_or(0.0)
            .max(after[0].as_f64().unwrap_or(0.0)),
        drawn[3]
            .as_f64()
            .unwrap_or(0.0)
            .max(after[1].as_f64().unwrap_or(0.0))
    );
    drop(browser);
    drop(agent);
}
