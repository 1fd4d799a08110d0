//! High availability with real processes on 127.0.0.1: a 3-member etcd cluster, three
//! `flotilla-server` processes on it (`--store etcd`, leader election with a 3 s lease, and once
//! with the default 15 s) and pull agents. Each check kills or pauses processes and asserts
//! what issue #25 asks:
//! - **takeover**: the leader SIGKILLed at a random point of scenario 02's failover (repeated
//!   `FLOTILLA_HA_ROUNDS` times, 2, each from a fresh fleet; the seed is printed and
//!   `FLOTILLA_HA_SEED` repeats it); another server leads within lease + 1 s, its controllers
//!   act within lease + 5 s, and the failover completes; a SIGTERMed leader hands over within
//!   2 s;
//! - **one API**: a standby lists the eviction brake as the leader sees it;
//! - **no duplicates**: a replay of the Works' watch never shows two Works for one binding on
//!   one cluster;
//! - **fence**: a leader SIGSTOPped past its lease (at a random moment) commits nothing once
//!   another leads;
//! - **no storm**: across every leader change, no healthy member turns not Ready and nothing
//!   healthy is evicted;
//! - **etcd loss**: one etcd member (etcd's leader) SIGKILLed, the fleet keeps working; two
//!   down, writes fail cleanly with a Status and no acknowledgement.
//!
//! In the takeover check the agents are given all three servers, the leader first: the leader's
//! death is also their server's, and they must carry on through another without a healthy
//! member turning not Ready (the agents' failover has its own tests too, `agent_servers.rs`).
//! "Nothing lost" is `ha_writes.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flotilla_tests::ha::{duplicate_works, fleet_agent, rounds, Fleet, KillPoints};
use flotilla_tests::{
    eventually, healthy_on, placement_of, post_manifests, ready_members, scenario_text, ApiClient,
};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RB: &str =
    "/apis/work.karmada.io/v1alpha2/namespaces/default/resourcebindings/nginx-deployment";
const CLUSTERS: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";
const WORKS: &str = "/apis/work.karmada.io/v1alpha1/works";
const BRAKES: &str = "/apis/flotilla.io/v1alpha1/evictionbrakes";
const LEASE: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(60);

fn fleet() -> Fleet {
    Fleet::start(
        3,
        &["--fast-failover", "--leader-elect-lease-duration", "3s"],
    )
    .expect("the fleet starts")
}

/// nginx's placement, as (cluster, replicas).
fn placement(api: &ApiClient) -> Option<Vec<(String, i64)>> {
    placement_of(api, RB)
}

/// The one server that leads, once exactly one does.
fn the_leader(fleet: &Fleet, within: Duration) -> usize {
    eventually("exactly one leader", within, || match fleet.leaders()[..] {
        [one] => Ok(one),
        ref many => Err(format!("leaders: {many:?}")),
    })
}

/// Watches, from a server that stays up, that the healthy members stay Ready and that no
/// eviction names them; a stop flag ends it.
struct StormWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StormWatch {
    fn start(api: ApiClient, healthy: &[&str]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let healthy: Vec<String> = healthy.iter().map(|s| s.to_string()).collect();
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(ready) = ready_members(&api) {
                        for member in &healthy {
                            if !ready.contains(member) {
                                seen.lock().unwrap().push(format!("{member} not Ready"));
                            }
                        }
                    }
                    if let Ok(rb) = api.get(RB) {
                        for task in rb["spec"]["gracefulEvictionTasks"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                        {
                            let from = task["fromCluster"].as_str().unwrap_or("");
                            if healthy.iter().any(|h| h == from) {
                                seen.lock().unwrap().push(format!("eviction from {from}"));
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        let mut seen = self.seen.lock().unwrap().clone();
        seen.dedup();
        seen
    }
}

/// How long a takeover took, from the SIGKILL of the leader.
struct Takeover {
    /// Until another server led.
    led: Duration,
    /// Until its controllers committed a write.
    acted: Duration,
}

/// One takeover run: scenario 02 placed on three members, member1's agent killed, and the
/// leader SIGKILLed at a random point of the failover that follows (`points`): while member1's
/// loss is being detected, or up to two seconds after its NoExecute taint, when its eviction
/// and the rescheduling are under way. The failover must complete, with never two Works for
/// one binding on one cluster (a replay of the Works' watch), and no healthy member disturbed.
/// `lease` `None` runs with the default lease.
fn takeover(lease: Option<Duration>, points: &mut KillPoints) -> Takeover {
    let lease_flag = lease.map(|l| format!("{}s", l.as_secs()));
    let mut flags = vec!["--fast-failover"];
    if let Some(flag) = &lease_flag {
        flags.extend(["--leader-elect-lease-duration", flag]);
    }
    let lease = lease.unwrap_or(Duration::from_secs(15));
    let mut fleet = Fleet::start(3, &flags).expect("the fleet starts");
    let leader = the_leader(&fleet, WAIT);
    // The test talks to a server that stays up through the run; the agents start on the
    // leader, and know the others.
    let (stay, other) = match leader {
        0 => (1, 2),
        1 => (2, 0),
        _ => (0, 1),
    };
    let api = fleet.api(stay);
    let servers = [leader, stay, other]
        .map(|i| fleet.server(i).unwrap().url.clone())
        .join(",");
    let data = fleet.dir().to_path_buf();
    let mut member1 = fleet_agent(&servers, "member1", &data);
    let _member2 = fleet_agent(&servers, "member2", &data);
    let _member3 = fleet_agent(&servers, "member3", &data);
    eventually("3 Ready members", WAIT, || {
        (ready_members(&api)?.len() == 3).then_some(())
    });
    // A standby shows the eviction brake as the leader sees it (the leader publishes it).
    eventually(
        "a standby to show the leader's eviction brake",
        WAIT,
        || {
            let shown = |api: &ApiClient| -> Option<Vec<(String, String, i64)>> {
                let list = api.get(BRAKES).ok()?;
                list["items"]
                    .as_array()?
                    .iter()
                    .map(|b| {
                        Some((
                            b["metadata"]["name"].as_str()?.to_string(),
                            b["status"]["state"].as_str()?.to_string(),
                            b["status"]["clusters"].as_i64()?,
                        ))
                    })
                    .collect()
            };
            let (Some(leaders), Some(standbys)) = (shown(&fleet.api(leader)), shown(&api)) else {
                return Err("no answer".to_string());
            };
            let stamped = api.get(BRAKES).is_ok_and(|list| {
                list["items"][0]["metadata"]["annotations"]["flotilla.io/published-at"].is_string()
            });
            (stamped && standbys == leaders && standbys.iter().any(|(_, _, n)| *n == 3))
                .then_some(())
                .ok_or(format!("leader {leaders:?}, standby {standbys:?}"))
        },
    );
    let works_from = api.get(WORKS).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    let want = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    eventually("the 1:2 placement, Healthy on both", WAIT, || {
        (placement(&api) == Some(want.clone())
            && healthy_on(&api, RB, "member1")
            && healthy_on(&api, RB, "member2"))
        .then_some(())
    });
    let storm = StormWatch::start(fleet.api(stay), &["member2", "member3"]);

    // member1 dies; at a random point of its failover, the leader dies too.
    member1.process.kill();
    let point = if points.below(3) == 0 {
        let delay = points.between(Duration::ZERO, Duration::from_secs(1));
        eprintln!("kill point: {delay:?} after member1's agent died, before its taint");
        delay
    } else {
        eventually("member1 tainted NoExecute", WAIT, || {
            let c = api.get(&format!("{CLUSTERS}/member1")).ok()?;
            c["spec"]["taints"]
                .as_array()?
                .iter()
                .any(|t| t["effect"] == "NoExecute")
                .then_some(())
        });
        let delay = points.between(Duration::ZERO, Duration::from_secs(2));
        eprintln!("kill point: {delay:?} after member1's NoExecute taint");
        delay
    };
    std::thread::sleep(point);
    let killed = Instant::now();
    fleet.kill_server(leader);
    let next = the_leader(&fleet, lease + Duration::from_secs(5));
    let led = killed.elapsed();
    assert_ne!(next, leader);
    eventually(
        "the new leader's controllers to write",
        lease + Duration::from_secs(10),
        || (fleet.metric(next, "flotilla_leader_last_commit_revision")? > 0.0).then_some(()),
    );
    let acted = killed.elapsed();
    eprintln!("takeover after SIGKILL (lease {lease:?}): led after {led:?}, controllers wrote after {acted:?}");
    assert!(
        led <= lease + Duration::from_secs(1) + Duration::from_millis(500),
        "another server led {led:?} after the leader died"
    );
    assert!(
        acted <= lease + Duration::from_secs(5),
        "the new leader's controllers acted {acted:?} after the leader died"
    );

    // The failover completes: member2 holds all three, and the task ends.
    let moved = vec![("member2".to_string(), 3)];
    eventually("member2 to get all 3 replicas", WAIT, || {
        (placement(&api) == Some(moved.clone()) && healthy_on(&api, RB, "member2")).then_some(())
    });
    eventually("the eviction task to end", WAIT, || {
        let rb = api.get(RB).ok()?;
        rb["spec"]["gracefulEvictionTasks"]
            .as_array()
            .is_none_or(Vec::is_empty)
            .then_some(())
    });

    // A SIGTERMed leader resigns: the next leads at once. `other` is stopped only if it leads.
    if next == other {
        let terminated = Instant::now();
        assert!(fleet.terminate_server(next).unwrap(), "a clean exit");
        let after = the_leader(&fleet, Duration::from_secs(10));
        assert_eq!(after, stay);
        let took = terminated.elapsed();
        eprintln!("takeover after SIGTERM: {took:?}");
        assert!(
            took <= Duration::from_secs(2) + Duration::from_millis(500),
            "{took:?}"
        );
    }
    let storms = storm.finish();
    assert!(storms.is_empty(), "healthy members disturbed: {storms:?}");
    let (events, duplicates) = replay_works(fleet.server(stay).unwrap(), &works_from);
    eprintln!("replayed {events} Work events");
    assert!(events > 0, "the replay saw no Work");
    assert!(duplicates.is_empty(), "{duplicates:#?}");
    Takeover { led, acted }
}

/// Replays the Works' watch from resourceVersion `from` to now: how many events it saw, and
/// every moment at which one binding had two Works on one cluster.
fn replay_works(server: &flotilla_tests::Server, from: &str) -> (usize, Vec<String>) {
    let text = reqwest::blocking::Client::new()
        .get(format!(
            "{}{WORKS}?watch=true&resourceVersion={from}&timeoutSeconds=3",
            server.url
        ))
        .bearer_auth(&server.token)
        .timeout(Duration::from_secs(30))
        .send()
        .unwrap()
        .text()
        .unwrap();
    duplicate_works(&text)
}

#[test]
fn a_killed_leader_is_replaced_and_the_failover_it_left_completes() {
    let mut points = KillPoints::new("takeover");
    for round in 0..rounds(2) {
        eprintln!("round {round}");
        takeover(Some(LEASE), &mut points);
    }
}

#[test]
fn a_killed_leader_is_replaced_within_the_default_lease() {
    let mut points = KillPoints::new("takeover, default lease");
    let times = takeover(None, &mut points);
    eprintln!(
        "default lease: led after {:?}, controllers wrote after {:?}",
        times.led, times.acted
    );
}

#[test]
fn a_paused_leader_commits_nothing_once_another_leads() {
    let mut points = KillPoints::new("fence");
    let fleet = fleet();
    let leader = the_leader(&fleet, WAIT);
    let stay = (leader + 1) % 3;
    let api = fleet.api(stay);
    let servers = [stay, leader, (leader + 2) % 3]
        .map(|i| fleet.server(i).unwrap().url.clone())
        .join(",");
    let data = fleet.dir().to_path_buf();
    let _m1 = fleet_agent(&servers, "member1", &data);
    let _m2 = fleet_agent(&servers, "member2", &data);
    eventually("2 Ready members", WAIT, || {
        (ready_members(&api)?.len() == 2).then_some(())
    });
    post_manifests(&api, &scenario_text("02-divided-weighted-failover.yaml"));
    eventually("the placement", WAIT, || {
        placement(&api).filter(|p| !p.is_empty())
    });
    let storm = StormWatch::start(fleet.api(stay), &["member1", "member2"]);

    // At a random moment the leader pauses past its lease; another leads and acts.
    let pause = points.between(Duration::ZERO, Duration::from_millis(1500));
    eprintln!("pause point: {pause:?} after the placement");
    std::thread::sleep(pause);
    fleet.signal_server(leader, "STOP").unwrap();
    let next = eventually("another leader", LEASE + Duration::from_secs(10), || {
        fleet
            .leaders()
            .into_iter()
            .find(|l| *l != leader)
            .ok_or("none yet")
    });
    // The new leader acts: a change only controllers handle (scale the template).
    let mut deploy = api
        .get("/apis/apps/v1/namespaces/default/deployments/nginx")
        .unwrap();
    deploy["spec"]["replicas"] = serde_json::json!(6);
    let (code, body) = api
        .send(
            "PUT",
            "/apis/apps/v1/namespaces/default/deployments/nginx",
            Some(&deploy),
        )
        .unwrap();
    assert_eq!(code, 200, "{body}");
    eventually("the new leader to place 6 replicas", WAIT, || {
        let total: i64 = placement(&api)?.iter().map(|(_, r)| r).sum();
        (total == 6).then_some(())
    });
    let new_term = fleet
        .metric(next, "flotilla_leader_term_start_revision")
        .unwrap();

    // The old leader wakes up, believing it leads; whatever it tries is refused.
    fleet.signal_server(leader, "CONT").unwrap();
    eventually("the old leader to step down", WAIT, || {
        (fleet.metric(leader, "flotilla_leader")? == 0.0).then_some(())
    });
    let last = fleet
        .metric(leader, "flotilla_leader_last_commit_revision")
        .unwrap();
    let refused = fleet
        .metric(leader, "flotilla_leader_fenced_writes_total")
        .expect("the old leader counts its refused writes");
    let ended = |reason: &str| {
        fleet
            .metric(
                leader,
                &format!("flotilla_leader_terms_ended_total{{reason=\"{reason}\"}}"),
            )
            .unwrap_or(0.0)
    };
    let (fenced, expired) = (
        ended("fenced"),
        ended("renew_deadline") + ended("lease_lost"),
    );
    eprintln!(
        "fence: the old leader's last commit at revision {last}, the new term began at {new_term}; {refused} writes refused; its term ended fenced {fenced}, expired {expired}"
    );
    assert!(
        last < new_term,
        "the old leader committed at revision {last}, after the new term began at {new_term}"
    );
    // On waking, either its renewal finds the renew deadline past, or a controller's write
    // comes first and is refused by the fence: one term ended, never by resigning, and a term
    // ended by its fence counted the refusal that ended it.
    assert_eq!(fenced + expired, 1.0, "the old leader's one term ended");
    assert_eq!(ended("resigned"), 0.0);
    if fenced == 1.0 {
        assert!(refused >= 1.0, "a fenced term counted no refusal");
    }
    assert_eq!(fleet.leaders(), vec![next], "one leader");
    let storms = storm.finish();
    assert!(storms.is_empty(), "healthy members disturbed: {storms:?}");
}

#[test]
fn losing_one_etcd_member_is_survived_and_losing_two_fails_writes_cleanly() {
    let mut fleet = fleet();
    let api = fleet.api(0);
    let cm = |name: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
    };
    let path = "/api/v1/namespaces/default/configmaps";
    assert_eq!(api.send("POST", path, Some(&cm("before"))).unwrap().0, 201);

    // etcd's own leader dies: after its election the fleet writes again.
    let etcd_leader = eventually("etcd's leader", WAIT, || fleet.etcd_leader());
    fleet.kill_etcd(etcd_leader);
    eventually("a write with one etcd member down", WAIT, || {
        match api.send("POST", path, Some(&cm("one-down"))) {
            Ok((201, _)) | Ok((409, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(
        api.get(&format!("{path}/one-down")).unwrap()["data"]["k"],
        "v"
    );

    // A second member dies: no quorum. Writes fail, with a Status, and are not acknowledged.
    let second = (etcd_leader + 1 + KillPoints::new("etcd loss").below(2) as usize) % 3;
    fleet.kill_etcd(second);
    let (code, body) = api.send("POST", path, Some(&cm("no-quorum"))).unwrap();
    eprintln!("write without quorum: {code} {body}");
    assert!(
        code >= 500,
        "a write without quorum must fail, got {code}: {body}"
    );
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");

    // Quorum back: the fleet works. (The refused write may still land, as etcd may commit a
    // proposal it had when quorum returns: it was never acknowledged, which is the promise.)
    fleet.restart_etcd(second).unwrap();
    eventually("a write with quorum back", WAIT, || {
        match api.send("POST", path, Some(&cm("after"))) {
            Ok((201, _)) | Ok((409, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(
        api.get(&format!("{path}/before")).unwrap()["data"]["k"],
        "v"
    );
}

/// `scripts/ha-local.sh --check`, the layout docs/operations.md offers for trying high
/// availability, run as a user runs it with this build's binaries: it must pass its own check
/// (one leader; a write through one server read through all; SIGTERM hands over within 2 s,
/// SIGKILL within the lease) and leave no process or directory behind.
#[test]
fn the_local_ha_layout_script_checks_out() {
    let server = flotilla_tests::binary("flotilla-server").unwrap();
    let bins = server.parent().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ha-local.sh");
    let child = std::process::Command::new("bash")
        .arg(script)
        .arg("--check")
        .env("FLOTILLA_BIN_DIR", bins)
        .env("TMPDIR", scratch.path())
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting scripts/ha-local.sh");
    // The whole group is SIGKILLed when dropped, also when this test fails.
    let mut run = flotilla_tests::Process {
        child,
        name: "scripts/ha-local.sh".into(),
    };
    let status = eventually(
        "scripts/ha-local.sh to end",
        Duration::from_secs(180),
        || run.child.try_wait().ok().flatten(),
    );
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    run.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    run.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.success(),
        "--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for line in [
        "is read through all three",
        "SIGTERM of server",
        "SIGKILL of server",
        "check passed",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
