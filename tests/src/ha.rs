//! A highly available fleet for the end-to-end tests: a 3-member etcd cluster (Debian's
//! `etcd`, started on 127.0.0.1 by `flotilla_server::testing::etcd`), N `flotilla-server`
//! processes on it (`--store etcd`, leader election on), all stopped when the fleet drops.
//! Each server has its own data directory, and the servers speak plain HTTP. The admin and
//! join tokens are seeded into the first server's directory, so the test knows them; the fleet
//! keeps them in the shared store, and the others, seeded the same, agree. The checks'
//! randomness ([`KillPoints`]) and replays ([`duplicate_works`]) live here too.

use crate::{Agent, ApiClient, Server};
use anyhow::{anyhow, Context, Result};
use flotilla_server::testing::etcd::EtcdCluster;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The fleet's admin token, seeded into every server's data directory.
pub const ADMIN_TOKEN: &str = "ha-admin-token-0123456789abcdef";
/// The fleet's join token.
pub const JOIN_TOKEN: &str = "ha-join-token-0123456789abcdef";

/// etcd, and the servers on it.
pub struct Fleet {
    runtime: tokio::runtime::Runtime,
    /// The etcd cluster.
    pub etcd: EtcdCluster,
    /// The servers, `None` once stopped.
    pub servers: Vec<Option<Server>>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl Fleet {
    /// Starts a 3-member etcd and `servers` servers with `extra` flags each.
    pub fn start(servers: usize, extra: &[&str]) -> Result<Fleet> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let etcd = runtime
            .block_on(EtcdCluster::start(3))
            .map_err(|e| anyhow!("starting etcd (scripts/setup.sh installs it): {e}"))?;
        let mut fleet = Fleet {
            runtime,
            etcd,
            servers: Vec::new(),
            dir: tempfile::tempdir()?,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for i in 0..servers {
            let server = fleet.spawn_server(i)?;
            fleet.servers.push(Some(server));
        }
        Ok(fleet)
    }

    /// etcd's client URLs, comma-separated.
    pub fn endpoints(&self) -> String {
        self.etcd.endpoints().join(",")
    }

    /// The directory for test data (agents' data dirs, …).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn server_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("server{i}"))
    }

    fn spawn_server(&self, i: usize) -> Result<Server> {
        self.spawn_server_on(i, "127.0.0.1:0")
    }

    fn spawn_server_on(&self, i: usize, listen: &str) -> Result<Server> {
        let data = self.server_dir(i);
        std::fs::create_dir_all(&data)?;
        std::fs::write(data.join("admin.token"), ADMIN_TOKEN)?;
        std::fs::write(data.join("join.token"), JOIN_TOKEN)?;
        let endpoints = self.endpoints();
        let mut args = vec![
            "--store",
            "etcd",
            "--etcd-endpoints",
            &endpoints,
            "--plain-http",
        ];
        args.extend(self.extra.iter().map(String::as_str));
        Server::start_on(&data, listen, &args).with_context(|| format!("starting server {i}"))
    }

    /// Starts server `i` again (after it was stopped), with the same data directory.
    pub fn restart_server(&mut self, i: usize) -> Result<()> {
        let server = self.spawn_server(i)?;
        self.servers[i] = Some(server);
        Ok(())
    }

    /// Starts server `i` again on `listen` (the `host:port` it served before), so its
    /// clients' URLs hold.
    pub fn restart_server_on(&mut self, i: usize, listen: &str) -> Result<()> {
        let server = self.spawn_server_on(i, listen)?;
        self.servers[i] = Some(server);
        Ok(())
    }

    /// Server `i`, if running.
    pub fn server(&self, i: usize) -> Option<&Server> {
        self.servers.get(i).and_then(Option::as_ref)
    }

    /// An admin client of server `i`.
    ///
    /// # Panics
    /// When server `i` is not running.
    #[allow(clippy::expect_used)]
    pub fn api(&self, i: usize) -> ApiClient {
        ApiClient::admin(self.server(i).expect("a running server")).expect("an API client")
    }

    /// The value of metric `name` (no labels) on server `i`.
    pub fn metric(&self, i: usize, name: &str) -> Option<f64> {
        let server = self.server(i)?;
        let text = reqwest::blocking::Client::new()
            .get(format!("{}/metrics", server.url))
            .bearer_auth(&server.token)
            .timeout(Duration::from_secs(2))
            .send()
            .ok()?
            .text()
            .ok()?;
        metric_value(&text, name)
    }

    /// The running servers that say they lead.
    pub fn leaders(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|i| self.metric(*i, "flotilla_leader") == Some(1.0))
            .collect()
    }

    /// SIGKILLs server `i`.
    pub fn kill_server(&mut self, i: usize) {
        if let Some(mut server) = self.servers[i].take() {
            server.process.kill();
        }
    }

    /// SIGTERMs server `i` and waits for its clean exit.
    pub fn terminate_server(&mut self, i: usize) -> Result<bool> {
        match self.servers[i].take() {
            Some(mut server) => server.process.terminate(Duration::from_secs(30)),
            None => Ok(true),
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to server `i`.
    pub fn signal_server(&self, i: usize, signal: &str) -> Result<()> {
        let server = self
            .server(i)
            .ok_or_else(|| anyhow!("server {i} is not running"))?;
        let pid = server.process.child.id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
        Ok(())
    }

    /// SIGKILLs etcd member `i`.
    pub fn kill_etcd(&mut self, i: usize) {
        self.etcd.kill(i);
    }

    /// Starts etcd member `i` again.
    pub fn restart_etcd(&mut self, i: usize) -> Result<()> {
        self.runtime
            .block_on(self.etcd.restart(i))
            .map_err(|e| anyhow!("restarting etcd member {i}: {e}"))
    }

    /// Which etcd member is etcd's raft leader.
    pub fn etcd_leader(&self) -> Option<usize> {
        self.runtime.block_on(self.etcd.leader_index())
    }
}

/// A pull agent for member `name` that talks to `servers` (comma-separated, the first first;
/// plain HTTP, the fleet's join token), its data under `data/<name>`, with second-scale
/// timings.
///
/// # Panics
/// When the agent does not start.
#[allow(clippy::expect_used)]
pub fn fleet_agent(servers: &str, name: &str, data: &Path) -> Agent {
    let token = data.join("join.token");
    std::fs::write(&token, JOIN_TOKEN).expect("the join token is written");
    let dir = data.join(name);
    let mut args = vec![
        "--server",
        servers,
        "--cluster-name",
        name,
        "--token-file",
        token.to_str().expect("a UTF-8 path"),
        "--data-dir",
        dir.to_str().expect("a UTF-8 path"),
    ];
    args.extend(crate::AGENT_TEST_TIMINGS.iter().copied());
    Agent::start(&args).expect("starting flotilla-agent")
}

/// Random kill points that a failed run can repeat: a xorshift generator seeded from
/// `FLOTILLA_HA_SEED`, or from the clock, and the seed printed.
pub struct KillPoints {
    state: u64,
}

impl KillPoints {
    /// A generator for the check `what`; prints its seed.
    pub fn new(what: &str) -> KillPoints {
        let seed = std::env::var("FLOTILLA_HA_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: kill points from seed {seed} (FLOTILLA_HA_SEED={seed} repeats them)");
        KillPoints { state: seed | 1 }
    }

    /// Another generator, seeded from this one (for a thread of its own).
    pub fn fork(&mut self) -> KillPoints {
        let seed = self.below(u64::MAX);
        KillPoints { state: seed | 1 }
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % n.max(1)
    }

    /// A duration in `lo..hi`, to the millisecond.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(self.below(span.max(1)))
    }
}

/// How many rounds each randomized check runs: `FLOTILLA_HA_ROUNDS`, else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("FLOTILLA_HA_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The label naming a Work's ResourceBinding (its permanent id).
const RB_ID_LABEL: &str = "resourcebinding.karmada.io/permanent-id";

/// Reads a replay of the Works' watch (one JSON event per line): how many events it holds, and
/// every moment at which one binding had two Works on one cluster. A Work counts from its
/// ADDED to its DELETED event, being deleted or not.
///
/// # Panics
/// On a line that is not a watch event of a Work.
#[allow(clippy::panic)]
pub fn duplicate_works(replay: &str) -> (usize, Vec<String>) {
    let mut live: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    let (mut events, mut duplicates) = (0, Vec::new());
    for line in replay.lines().filter(|l| !l.trim().is_empty()) {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a watch event ({e}): {line}"));
        let meta = &event["object"]["metadata"];
        let (Some(cluster), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str())
        else {
            panic!("not a Work: {line}");
        };
        let binding = meta["labels"][RB_ID_LABEL]
            .as_str()
            .unwrap_or(name)
            .to_string();
        let works = live.entry((cluster.to_string(), binding)).or_default();
        events += 1;
        match event["type"].as_str() {
            Some("ADDED") | Some("MODIFIED") => {
                works.insert(name.to_string());
            }
            Some("DELETED") => {
                works.remove(name);
            }
            other => panic!("unexpected watch event {other:?}: {line}"),
        }
        if works.len() > 1 {
            duplicates.push(format!(
                "at resourceVersion {}: {works:?} in {cluster}",
                meta["resourceVersion"]
            ));
        }
    }
    (events, duplicates)
}

/// The value of an unlabelled metric in a Prometheus text exposition.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_values_are_read_by_exact_name() {
        let text =
            "# HELP flotilla_leader x\nflotilla_leader 1\nflotilla_leader_term_revision 42\n";
        assert_eq!(metric_value(text, "flotilla_leader"), Some(1.0));
        assert_eq!(
            metric_value(text, "flotilla_leader_term_revision"),
            Some(42.0)
        );
        assert_eq!(metric_value(text, "flotilla_missing"), None);
    }

    #[test]
    fn a_replay_shows_two_works_of_one_binding_on_one_cluster() {
        let event = |kind: &str, cluster: &str, name: &str, binding: &str| {
            serde_json::json!({"type": kind, "object": {"metadata": {
                "namespace": cluster, "name": name, "resourceVersion": "1",
                "labels": {RB_ID_LABEL: binding}}}})
            .to_string()
        };
        let replay = |events: &[String]| duplicate_works(&events.join("\n"));
        let one_at_a_time = [
            event("ADDED", "karmada-es-m1", "w1", "b"),
            event("ADDED", "karmada-es-m2", "w1", "b"),
            event("MODIFIED", "karmada-es-m1", "w1", "b"),
            event("DELETED", "karmada-es-m1", "w1", "b"),
            event("ADDED", "karmada-es-m1", "w2", "b"),
            event("ADDED", "karmada-es-m1", "other", "c"),
        ];
        assert_eq!(replay(&one_at_a_time), (6, vec![]));
        let two = [
            event("ADDED", "karmada-es-m1", "w1", "b"),
            event("ADDED", "karmada-es-m1", "w2", "b"),
            event("DELETED", "karmada-es-m1", "w1", "b"),
        ];
        let (events, duplicates) = replay(&two);
        assert_eq!(events, 3);
        assert_eq!(duplicates.len(), 1, "{duplicates:?}");
    }

    #[test]
    fn kill_points_stay_in_range() {
        let mut points = KillPoints { state: 42 };
        for _ in 0..1000 {
            assert!(points.below(3) < 3);
            let d = points.between(Duration::from_millis(300), Duration::from_millis(900));
            assert!(d >= Duration::from_millis(300) && d < Duration::from_millis(900));
        }
    }
}
