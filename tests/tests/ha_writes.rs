//! Nothing lost, with real processes on 127.0.0.1: a 3-member etcd cluster and three
//! `flotilla-server` processes on it (`--store etcd`), with one client pinned to each server
//! writing and reading throughout, while the leading server and etcd members (etcd's leader
//! among them) are SIGKILLed and restarted at random moments (the seed is printed;
//! `FLOTILLA_HA_SEED` repeats a run, `FLOTILLA_HA_ROUNDS` sets how many kills). Issue #25 asks:
//! - every acknowledged write is read back, through every server;
//! - per key, the history of writes and reads through the three servers is linearizable (a
//!   register model, checked by `flotilla_tests::linearizability`);
//! - a client that moves between servers never sees a resourceVersion go backwards;
//! - no 5xx without a Status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::eventually;
use flotilla_tests::ha::{rounds, Fleet, KillPoints, ADMIN_TOKEN};
use flotilla_tests::linearizability::{self, Call, Op};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
/// The registers every client writes and reads.
const KEYS: [&str; 3] = ["reg-0", "reg-1", "reg-2"];
const INITIAL: &str = "initial";

/// The servers' current URLs (a restarted server listens on a new port); `None` while down.
type Urls = Arc<Mutex<Vec<Option<String>>>>;

/// What a request came to.
enum Answer {
    /// The server answered with this code and body.
    Code(u16, Value),
    /// No answer: the connection failed or timed out.
    Lost,
}

/// A client of whichever process is server `server` now.
struct Pinned {
    http: reqwest::blocking::Client,
    urls: Urls,
    server: usize,
}

impl Pinned {
    fn new(urls: Urls, server: usize) -> Self {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        Pinned { http, urls, server }
    }

    fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Answer {
        let Some(url) = self.urls.lock().unwrap()[self.server].clone() else {
            return Answer::Lost;
        };
        let mut request = self
            .http
            .request(method, format!("{url}{path}"))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        match request.send() {
            Ok(response) => {
                let code = response.status().as_u16();
                let text = response.text().unwrap_or_default();
                Answer::Code(code, serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            Err(_) => Answer::Lost,
        }
    }
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": {"v": value}})
}

/// What one client did.
#[derive(Default)]
struct Log {
    /// Per register, its calls.
    registers: BTreeMap<String, Vec<Call>>,
    /// ConfigMaps whose create was acknowledged (201).
    created: Vec<String>,
    /// Creates with an unknown outcome (a lost connection or a 5xx).
    unknown: usize,
    /// Creates and register writes refused with a 4xx: never written.
    refused: usize,
    /// Answers that break the rules: a 5xx without a Status, a resourceVersion going back.
    broken: Vec<String>,
}

impl Log {
    fn check_5xx(&mut self, what: &str, code: u16, body: &Value) {
        if code >= 500 && body["kind"] != "Status" {
            self.broken
                .push(format!("{what}: {code} without a Status: {body}"));
        }
    }
}

/// One client pinned to server `server`: creates ConfigMaps of its own and writes and reads
/// the registers at random until `stop`.
fn pinned_client(
    urls: Urls,
    server: usize,
    mut points: KillPoints,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> Log {
    let client = Pinned::new(urls, server);
    let now = || start.elapsed().as_nanos() as u64;
    let mut log = Log::default();
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let key = KEYS[points.below(KEYS.len() as u64) as usize];
        let lost = match points.below(3) {
            0 => {
                let name = format!("created-{server}-{seq}");
                match client.send(
                    reqwest::Method::POST,
                    CONFIGMAPS,
                    Some(&configmap(&name, "x")),
                ) {
                    Answer::Code(201, _) => {
                        log.created.push(name);
                        false
                    }
                    Answer::Code(code, body) if code >= 500 => {
                        log.check_5xx("create", code, &body);
                        log.unknown += 1;
                        false
                    }
                    Answer::Code(..) => {
                        log.refused += 1;
                        false
                    }
                    Answer::Lost => {
                        log.unknown += 1;
                        true
                    }
                }
            }
            1 => {
                let value = format!("c{server}-{seq}");
                let invoked = now();
                let answer = client.send(
                    reqwest::Method::PUT,
                    &format!("{CONFIGMAPS}/{key}"),
                    Some(&configmap(key, &value)),
                );
                let calls = log.registers.entry(key.to_string()).or_default();
                match answer {
                    Answer::Code(200, _) => {
                        calls.push(Call::done(Op::Write(value), invoked, now()));
                        false
                    }
                    Answer::Code(code, body) if code >= 500 => {
                        calls.push(Call::unknown(&value, invoked));
                        log.check_5xx("update", code, &body);
                        false
                    }
                    // Refused before it was written (a Conflict after the server's retries).
                    Answer::Code(..) => {
                        log.refused += 1;
                        false
                    }
                    Answer::Lost => {
                        calls.push(Call::unknown(&value, invoked));
                        true
                    }
                }
            }
            _ => {
                let invoked = now();
                let answer =
                    client.send(reqwest::Method::GET, &format!("{CONFIGMAPS}/{key}"), None);
                let read = match answer {
                    Answer::Code(200, body) => Some(body["data"]["v"].as_str().map(String::from)),
                    Answer::Code(404, _) => Some(None),
                    Answer::Code(code, body) => {
                        log.check_5xx("get", code, &body);
                        None
                    }
                    Answer::Lost => None,
                };
                if let Some(read) = read {
                    let returned = now();
                    log.registers
                        .entry(key.to_string())
                        .or_default()
                        .push(Call::done(Op::Read(read), invoked, returned));
                }
                false
            }
        };
        if lost {
            // The server is down or restarting: do not spin.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    log
}

/// A client that lists through server 0, 1, 2, 0, … and checks that the list's
/// resourceVersion never goes backwards.
fn roaming_client(urls: Urls, stop: Arc<AtomicBool>) -> (usize, Vec<String>) {
    let clients: Vec<Pinned> = (0..3).map(|i| Pinned::new(urls.clone(), i)).collect();
    let (mut newest, mut lists, mut broken) = (0u64, 0, Vec::new());
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        turn += 1;
        let server = turn % 3;
        match clients[server].send(reqwest::Method::GET, CONFIGMAPS, None) {
            Answer::Code(200, body) => {
                let rv: u64 = body["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if rv < newest {
                    broken.push(format!(
                        "server {server} listed at resourceVersion {rv} after {newest} was seen"
                    ));
                }
                newest = newest.max(rv);
                lists += 1;
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (lists, broken)
}

#[test]
fn every_acknowledged_write_is_kept_and_each_key_reads_linearizably_across_kills() {
    let mut fleet = Fleet::start(3, &["--leader-elect-lease-duration", "3s"]).unwrap();
    let urls: Urls = Arc::new(Mutex::new(
        (0..3)
            .map(|i| fleet.server(i).map(|s| s.url.clone()))
            .collect(),
    ));
    let api = fleet.api(0);
    for key in KEYS {
        let (code, body) = api
            .send("POST", CONFIGMAPS, Some(&configmap(key, INITIAL)))
            .unwrap();
        assert_eq!(code, 201, "{body}");
    }

    // The kill points, and each client's choice of what to do next, from one printed seed.
    let mut points = KillPoints::new("nothing lost");
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let pinned: Vec<_> = (0..3)
        .map(|server| {
            let (urls, stop, choices) = (urls.clone(), stop.clone(), points.fork());
            std::thread::spawn(move || pinned_client(urls, server, choices, start, stop))
        })
        .collect();
    let roaming = {
        let (urls, stop) = (urls.clone(), stop.clone());
        std::thread::spawn(move || roaming_client(urls, stop))
    };

    // Kills at random moments: the leading server, etcd's leader, or another etcd member.
    for round in 0..rounds(3) {
        std::thread::sleep(points.between(Duration::from_millis(300), Duration::from_secs(2)));
        let down = points.between(Duration::from_millis(200), Duration::from_secs(3));
        match points.below(3) {
            0 => {
                let leader = fleet.leaders().first().copied().unwrap_or(0);
                eprintln!("round {round}: SIGKILL server {leader}, down for {down:?}");
                urls.lock().unwrap()[leader] = None;
                fleet.kill_server(leader);
                std::thread::sleep(down);
                fleet.restart_server(leader).unwrap();
                urls.lock().unwrap()[leader] = fleet.server(leader).map(|s| s.url.clone());
            }
            kind => {
                let etcd_leader = fleet.etcd_leader().unwrap_or(0);
                let member = if kind == 1 {
                    etcd_leader
                } else {
                    (etcd_leader + 1 + points.below(2) as usize) % 3
                };
                eprintln!(
                    "round {round}: SIGKILL etcd member {member} (etcd's leader: {}), down for {down:?}",
                    member == etcd_leader
                );
                fleet.kill_etcd(member);
                std::thread::sleep(down);
                fleet.restart_etcd(member).unwrap();
            }
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<Log> = pinned.into_iter().map(|t| t.join().unwrap()).collect();
    let (lists, mut broken) = roaming.join().unwrap();

    // Read everything back through every server, as the history's last reads.
    let mut registers: BTreeMap<String, Vec<Call>> = BTreeMap::new();
    for log in &logs {
        broken.extend(log.broken.iter().cloned());
        for (key, calls) in &log.registers {
            registers
                .entry(key.clone())
                .or_default()
                .extend(calls.iter().cloned());
        }
    }
    let created: Vec<&String> = logs.iter().flat_map(|l| &l.created).collect();
    for server in 0..3 {
        let api = fleet.api(server);
        eventually("the server to serve reads", Duration::from_secs(60), || {
            api.get(CONFIGMAPS).ok()
        });
        for key in KEYS {
            let invoked = start.elapsed().as_nanos() as u64;
            let cm = api.get(&format!("{CONFIGMAPS}/{key}")).unwrap();
            let read = cm["data"]["v"].as_str().map(String::from);
            let returned = start.elapsed().as_nanos() as u64;
            registers
                .entry(key.to_string())
                .or_default()
                .push(Call::done(Op::Read(read), invoked, returned));
        }
        let listed = api.get(CONFIGMAPS).unwrap();
        let names: std::collections::HashSet<&str> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect();
        let missing: Vec<_> = created
            .iter()
            .filter(|n| !names.contains(n.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "server {server} lost acknowledged creates: {missing:?}"
        );
    }

    let writes = |calls: &[Call], known: bool| {
        calls
            .iter()
            .filter(|c| matches!(c.op, Op::Write(_)) && c.returned.is_some() == known)
            .count()
    };
    for (key, calls) in &registers {
        eprintln!(
            "{key}: {} calls, {} acknowledged writes, {} with an unknown outcome",
            calls.len(),
            writes(calls, true),
            writes(calls, false)
        );
        assert!(writes(calls, true) > 0, "{key}: no write was acknowledged");
        if let Err(e) = linearizability::check(Some(INITIAL), calls) {
            panic!("{key}: {e}");
        }
    }
    eprintln!(
        "{} acknowledged creates, {} unknown, {} refused; {lists} lists while roaming",
        created.len(),
        logs.iter().map(|l| l.unknown).sum::<usize>(),
        logs.iter().map(|l| l.refused).sum::<usize>()
    );
    assert!(broken.is_empty(), "{broken:#?}");
}
