//! Helpers for Flotilla's end-to-end tests: start the real binaries on 127.0.0.1 with port 0,
//! stop them when the test ends (also when it fails), run kubectl against them, and wait with
//! deadlines that say what they waited for.

pub mod browser;
pub mod ha;
pub mod linearizability;

use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The directory holding the workspace's built binaries (`target/<profile>`).
fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test-binary>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow!("unexpected test binary location {}", exe.display()))?;
    Ok(dir.to_path_buf())
}

/// Where a benchmark's binaries are built: their own target directory under `target/`.
///
/// Cargo names a compiled dependency the same whatever features it was built with, so
/// building the server alone, the agent alone and the bench (each with its own feature set
/// of rustls, reqwest, ring …) in one target directory rebuilt those crates on every run,
/// minutes each time. Here both binaries are built together, once, and stay.
fn bench_target_dir() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest
        .parent()
        .ok_or_else(|| anyhow!("no workspace above {}", manifest.display()))?;
    Ok(workspace.join("target").join("bench-bins"))
}

/// Path of a workspace binary, building it first if this process did not.
///
/// A test uses the binaries of its own profile (`cargo test --workspace` built them). A
/// benchmark (a release build) always asks cargo once per process, building the server and the
/// agent together in [`bench_target_dir`]: that rebuilds them if the sources changed, so a
/// stale release binary left from an earlier build is never measured instead of the code at
/// hand (`cargo bench` builds only the bench's own package).
///
/// `FLOTILLA_BIN_DIR` names a directory whose binaries are run as they are, never built (to
/// measure two builds against each other).
pub fn binary(name: &str) -> Result<PathBuf> {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    if let Some(dir) = std::env::var_os("FLOTILLA_BIN_DIR") {
        let path = PathBuf::from(dir).join(name);
        if !path.exists() {
            bail!("FLOTILLA_BIN_DIR has no {}", path.display());
        }
        return Ok(path);
    }
    let release = bin_dir()?.ends_with("release");
    if !release {
        let path = bin_dir()?.join(name);
        if !path.exists() {
            let package = match name {
                "flotilla-agent" => "flotilla-agent",
                _ => "flotilla-server",
            };
            cargo_build(&["build", "-p", package, "--bin", name], None)?;
        }
        return Ok(path);
    }
    let target = bench_target_dir()?;
    let path = target.join("release").join(name);
    let mut built = BUILT
        .lock()
        .map_err(|_| anyhow!("binary build lock poisoned"))?;
    if !*built {
        cargo_build(
            &[
                "build",
                "--release",
                "-p",
                "flotilla-server",
                "-p",
                "flotilla-agent",
                "--bins",
            ],
            Some(&target),
        )?;
        *built = true;
    }
    if !path.exists() {
        bail!("cargo built no {}", path.display());
    }
    Ok(path)
}

/// Runs cargo in the workspace (optionally with its own target directory).
fn cargo_build(args: &[&str], target_dir: Option<&Path>) -> Result<()> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(dir) = target_dir {
        cmd.env("CARGO_TARGET_DIR", dir);
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo {} failed", args.join(" "));
    }
    Ok(())
}

/// A child process that is killed and reaped when dropped.
pub struct Process {
    /// The child.
    pub child: Child,
    /// What it is, for messages.
    pub name: String,
}

impl Process {
    /// Sends SIGKILL to the process and everything it started (its process group), and reaps.
    pub fn kill(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `within` for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self, within: Duration) -> Result<bool> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.success());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        bail!("{} did not exit within {within:?} of SIGTERM", self.name)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `flotilla-server` process.
pub struct Server {
    /// The process.
    pub process: Process,
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// The admin token it wrote.
    pub token: String,
}

impl Server {
    /// Starts `flotilla-server --listen 127.0.0.1:0 --data-dir <dir> <extra...>` and waits until
    /// it prints its URL.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Result<Server> {
        Self::start_on(data_dir, "127.0.0.1:0", extra)
    }

    /// Starts `flotilla-server --listen <listen> --data-dir <dir> <extra...>` and waits until it
    /// prints its URL. To restart a dead server in place (its clients keep their URL), pass
    /// [`Server::listen_addr`] of the old one: its port is free once the process is gone (a bind
    /// that still fails is retried for 10 s).
    pub fn start_on(data_dir: &Path, listen: &str, extra: &[&str]) -> Result<Server> {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--listen".as_ref(),
            listen.as_ref(),
            "--data-dir".as_ref(),
            data_dir.as_os_str(),
        ];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let (process, url) = start_listening("flotilla-server", &args, listen)?;
        let token = std::fs::read_to_string(data_dir.join("admin.token"))?
            .trim()
            .to_string();
        Ok(Server {
            process,
            url,
            data_dir: data_dir.to_path_buf(),
            token,
        })
    }

    /// The `host:port` the server serves on (its URL without the scheme).
    pub fn listen_addr(&self) -> &str {
        host_port(&self.url)
    }

    /// Path of the kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    /// The base URL of the simulated members a `--sim-members` server started (each member
    /// answers under `<url>/members/<name>`).
    ///
    /// # Panics
    /// When the server has not written `sim-members.url` within 60 s.
    pub fn sim_members_url(&self) -> String {
        let url = eventually("sim-members.url", Duration::from_secs(60), || {
            std::fs::read_to_string(self.data_dir.join("sim-members.url")).ok()
        });
        url.trim().to_string()
    }
}

/// The names of the Clusters that report Ready=True (`None` when the list fails).
pub fn ready_members(api: &ApiClient) -> Option<std::collections::BTreeSet<String>> {
    let list = api.get("/apis/cluster.karmada.io/v1alpha1/clusters").ok()?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .filter(|c| {
                c.pointer("/status/conditions")
                    .and_then(serde_json::Value::as_array)
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
            .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
            .collect(),
    )
}

/// Waits (at most 60 s) until `n` Cluster objects report Ready=True.
///
/// # Panics
/// When they do not in time.
pub fn wait_members_ready(api: &ApiClient, n: usize) {
    eventually(
        &format!("{n} Ready members"),
        Duration::from_secs(60),
        || (ready_members(api)?.len() == n).then_some(()),
    );
}

/// A running `flotilla-agent` process.
pub struct Agent {
    /// The process.
    pub process: Process,
    /// URL of its member HTTP surface (`--listen`).
    pub url: String,
}

impl Agent {
    /// Starts `flotilla-agent <args> --listen 127.0.0.1:0` and waits until it prints its URL.
    pub fn start(args: &[&str]) -> Result<Agent> {
        Self::start_on(args, "127.0.0.1:0")
    }

    /// Starts `flotilla-agent <args> --listen <listen>` and waits until it prints its URL. To
    /// restart a dead agent in place, pass [`Agent::listen_addr`] of the old one: its port is
    /// free once the process is gone (a bind that still fails is retried for 10 s).
    pub fn start_on(args: &[&str], listen: &str) -> Result<Agent> {
        let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        all.extend(["--listen", listen].map(std::ffi::OsStr::new));
        let (process, url) = start_listening("flotilla-agent", &all, listen)?;
        Ok(Agent { process, url })
    }

    /// The `host:port` the agent serves on (its URL without the scheme).
    pub fn listen_addr(&self) -> &str {
        host_port(&self.url)
    }
}

/// Starts a push member `name` (`flotilla-agent --mode push`) with its data under
/// `data/<name>`, serving on `listen` (`127.0.0.1:0` for a fresh port), its pods ready
/// `pod_startup_delay_ms` after they are placed. Register it with [`register_push_member`].
pub fn push_agent(
    name: &str,
    data: &Path,
    listen: &str,
    pod_startup_delay_ms: u64,
) -> Result<Agent> {
    let data = data.join(name).display().to_string();
    let delay = pod_startup_delay_ms.to_string();
    Agent::start_on(
        &[
            "--mode",
            "push",
            "--cluster-name",
            name,
            "--data-dir",
            &data,
            "--pod-startup-delay-ms",
            &delay,
        ],
        listen,
    )
}

/// Registers a push member: a Cluster `name` with `spec.syncMode: Push` and `apiEndpoint:
/// <url>`.
pub fn register_push_member(api: &ApiClient, name: &str, url: &str) -> Result<()> {
    let cluster = serde_json::json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name}, "spec": {"syncMode": "Push", "apiEndpoint": url}});
    match api.send(
        "POST",
        "/apis/cluster.karmada.io/v1alpha1/clusters",
        Some(&cluster),
    )? {
        (201, _) => Ok(()),
        (code, body) => bail!("registering push member {name} answered {code}: {body}"),
    }
}

/// Starts a pull agent for member `name` of `server` (join token and CA from the server's data
/// directory, its own data under `data/<name>`), with second-scale heartbeats and status.
pub fn pull_agent(server: &Server, name: &str, data: &Path) -> Agent {
    pull_agent_with(server, name, data, &[])
}

/// As [`pull_agent`], with `extra` flags appended.
pub fn pull_agent_with(server: &Server, name: &str, data: &Path, extra: &[&str]) -> Agent {
    let data = data.join(name);
    let ca = server.data_dir.join("tls.crt");
    let token = server.data_dir.join("join.token");
    let (data, ca, token) = (
        data.display().to_string(),
        ca.display().to_string(),
        token.display().to_string(),
    );
    #[allow(clippy::expect_used)]
    Agent::start(
        &[
            "--server",
            &server.url,
            "--cluster-name",
            name,
            "--token-file",
            &token,
            "--ca-file",
            &ca,
            "--data-dir",
            &data,
        ]
        .into_iter()
        .chain(AGENT_TEST_TIMINGS.iter().copied())
        .chain(extra.iter().copied())
        .collect::<Vec<&str>>(),
    )
    .expect("starting flotilla-agent")
}

/// The agent flags of second-scale tests: a lease renewed every 300 ms, status reported every
/// 300 ms, pods started 200 ms after their Work.
pub const AGENT_TEST_TIMINGS: &[&str] = &[
    "--lease-renew-interval-ms",
    "300",
    "--cluster-status-update-frequency-ms",
    "300",
    "--pod-startup-delay-ms",
    "200",
];

/// Registers a pull member `name` with the server's join token, as an agent would; answers
/// the member credential the server issued.
///
/// # Panics
/// When the join token cannot be read or the registration is refused.
#[allow(clippy::expect_used)]
pub fn register_member(server: &Server, name: &str) -> String {
    let join = std::fs::read_to_string(server.data_dir.join("join.token")).expect("join.token");
    let api = ApiClient::with_token(server, join.trim()).expect("a client");
    match api
        .send(
            "POST",
            "/flotilla/v1/register",
            Some(&serde_json::json!({"clusterName": name})),
        )
        .expect("registering")
    {
        (200, v) => v["token"].as_str().unwrap_or_default().to_string(),
        (code, v) => panic!("registering {name}: {code} {v}"),
    }
}

/// A binding's `spec.clusters` as (cluster, replicas), or `None` when it cannot be read.
pub fn placement_of(api: &ApiClient, binding_path: &str) -> Option<Vec<(String, i64)>> {
    let rb = api.get(binding_path).ok()?;
    Some(
        rb["spec"]["clusters"]
            .as_array()?
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["replicas"].as_i64().unwrap_or(0),
                )
            })
            .collect(),
    )
}

/// Server flags for second-scale failure detection of pull members: the server's
/// `--fast-failover` profile (a member silent for 2 s turns Ready Unknown, 2 s later it gets
/// the NoExecute taint, and the default tolerations of 0 s evict at once).
pub const FAST_PULL_FAILOVER: &[&str] = &["--fast-failover"];

/// A server with [`FAST_PULL_FAILOVER`] (its data in `data/server`) and three pull members,
/// `member1`..`member3`, each its own agent process (data under `data/<name>`), all Ready: the
/// fleet scenario 02 runs on.
pub fn fast_pull_fleet(data: &Path) -> (Server, ApiClient, [Agent; 3]) {
    let server = Server::start(&data.join("server"), FAST_PULL_FAILOVER)
        .unwrap_or_else(|e| panic!("starting the server: {e:#}"));
    let api = ApiClient::admin(&server).unwrap_or_else(|e| panic!("an admin client: {e:#}"));
    let members = ["member1", "member2", "member3"].map(|name| pull_agent(&server, name, data));
    wait_members_ready(&api, 3);
    (server, api, members)
}

/// Server flags that take the eviction brake's pacing and startup wait out of tests that are
/// not about it (a default server waits one `--cluster-monitor-grace-period` after its start
/// before it evicts anything, then lets one failed cluster out every 10 s per region). The
/// brake's stop of a fully disrupted fleet stays.
pub const NO_EVICTION_PACING: &[&str] = &[
    "--enable-eviction-rate-limit=false",
    "--eviction-startup-grace-period",
    "0s",
];

/// An exactly-once workload: Deployment `db` (one replica of postgres) and its policy, which
/// places a single copy on member1 or member2, purges it at once on failover and fences it.
pub const EXACTLY_ONCE_DB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: db
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
        - name: db
          image: postgres
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: db
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: db
  failover:
    cluster:
      purgeMode: Immediately
      fencing:
        exactlyOnce: true
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    spreadConstraints:
      - spreadByField: cluster
        maxGroups: 1
        minGroups: 1
"#;

/// Posts every document of a manifest text (a scenario of `examples/`, possibly rewritten)
/// into the `default` namespace, each to the collection of its apiVersion and kind (plural:
/// the lower-case kind plus `s`, `-y` → `-ies`). Each must be created.
pub fn post_manifests(api: &ApiClient, text: &str) {
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let doc: serde_json::Value = match serde::Deserialize::deserialize(doc) {
            Ok(doc) => doc,
            Err(e) => panic!("a manifest that is not YAML: {e}"),
        };
        let (Some(api_version), Some(kind)) = (doc["apiVersion"].as_str(), doc["kind"].as_str())
        else {
            panic!("a manifest without apiVersion and kind: {doc}");
        };
        let lower = kind.to_ascii_lowercase();
        let plural = match lower.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{lower}s"),
        };
        let root = if api_version.contains('/') {
            "apis"
        } else {
            "api"
        };
        let path = format!("/{root}/{api_version}/namespaces/default/{plural}");
        let path = path.as_str();
        match api.send("POST", path, Some(&doc)) {
            Ok((201, _)) => {}
            Ok((code, body)) => panic!("creating {path}: {code} {body}"),
            Err(e) => panic!("creating {path}: {e:#}"),
        }
    }
}

/// The text of a scenario of `examples/`.
pub fn scenario_text(file: &str) -> String {
    let path = scenarios_dir().join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The health the binding at `binding_path` reports for `cluster` in its aggregatedStatus.
pub fn health_on(api: &ApiClient, binding_path: &str, cluster: &str) -> Option<String> {
    let rb = api.get(binding_path).ok()?;
    rb["status"]["aggregatedStatus"]
        .as_array()?
        .iter()
        .find(|i| i["clusterName"] == cluster)?["health"]
        .as_str()
        .map(String::from)
}

/// Whether the binding at `binding_path` reports `cluster` Healthy.
pub fn healthy_on(api: &ApiClient, binding_path: &str, cluster: &str) -> bool {
    health_on(api, binding_path, cluster).as_deref() == Some("Healthy")
}

/// The graceful eviction tasks of the binding at `binding_path` (none when unreadable).
pub fn eviction_tasks(api: &ApiClient, binding_path: &str) -> Vec<serde_json::Value> {
    api.get(binding_path)
        .ok()
        .and_then(|rb| rb["spec"]["gracefulEvictionTasks"].as_array().cloned())
        .unwrap_or_default()
}

/// The Works in `cluster`'s execution namespace (none when unreadable).
pub fn works_on(api: &ApiClient, cluster: &str) -> Vec<serde_json::Value> {
    api.get(&format!(
        "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{cluster}/works"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

/// Sets a fault of a simulated member of a `--sim-members` server through its fault API
/// (`POST <member>/faults/<which>`, docs/members.md), and answers what the member said.
pub fn sim_fault(
    server: &Server,
    member: &str,
    which: &str,
    body: &serde_json::Value,
) -> serde_json::Value {
    let base = server.sim_members_url();
    let url = format!("{base}/members/{member}/faults/{which}");
    match member_call("POST", &url, Some(body)) {
        Ok((200, answer)) => answer,
        Ok((code, answer)) => panic!("{which} on {member}: {code} {answer}"),
        Err(e) => panic!("{which} on {member}: {e:#}"),
    }
}

/// The Events in `namespace` whose involved object is named `name` (none when unreadable).
pub fn events_about(api: &ApiClient, namespace: &str, name: &str) -> Vec<serde_json::Value> {
    api.get(&format!(
        "/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}"
    ))
    .ok()
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

/// Starts the binary `name` of this workspace with `args` (which make it listen on `listen`) in
/// a process group of its own and waits until it prints `<name> listening on <url>`. On a given
/// port (a restart in place), a process that exits before that (the port not free yet) is
/// started again for up to 10 s; on port 0 its failure is answered at once.
fn start_listening(
    name: &str,
    args: &[&std::ffi::OsStr],
    listen: &str,
) -> Result<(Process, String)> {
    let bin = binary(name)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut child = Command::new(&bin)
            .process_group(0)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut process = Process {
            child,
            name: name.into(),
        };
        let prefix = format!("{name} listening on ");
        match read_url(stdout, prefix) {
            Ok(url) => return Ok((process, url)),
            Err(e) => {
                let exited = process.child.try_wait()?.is_some();
                process.kill();
                if !exited || listen.ends_with(":0") || Instant::now() >= deadline {
                    return Err(e.context(format!("starting {name} on {listen}")));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// The `host:port` of a URL such as `https://127.0.0.1:7070/`.
fn host_port(url: &str) -> &str {
    url.split_once("://")
        .map_or(url, |(_, rest)| rest.trim_end_matches('/'))
}

/// Reads a child's stdout until a line starting with `prefix`, returning the rest of it; keeps
/// draining stdout in the background so the child never blocks on a full pipe.
fn read_url(stdout: std::process::ChildStdout, prefix: String) -> Result<String> {
    let (tx, rx) = mpsc::channel();
    let wanted = prefix.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(wanted.as_str()) {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .map_err(|_| anyhow!("no line starting with {prefix:?} within 60s"))
}

/// A blocking JSON client of the API that trusts the server's certificate.
pub struct ApiClient {
    http: reqwest::blocking::Client,
    base: String,
    token: String,
}

impl ApiClient {
    /// A client with the server's admin token.
    pub fn admin(server: &Server) -> Result<ApiClient> {
        Self::with_token(server, &server.token)
    }

    /// A client with another bearer token.
    pub fn with_token(server: &Server, token: &str) -> Result<ApiClient> {
        let mut builder = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30));
        let ca = server.data_dir.join("tls.crt");
        if server.url.starts_with("https") {
            builder =
                builder.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
        }
        Ok(ApiClient {
            http: builder.build()?,
            base: server.url.clone(),
            token: token.to_string(),
        })
    }

    /// Sends a request; returns the status code and the JSON body (Null when not JSON).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, serde_json::Value)> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            let ct = if method == reqwest::Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            req = req.header("content-type", ct).body(b.to_string());
        }
        status_and_json(req)
    }

    /// GET that must answer 200, its body as text (a watch's stream of events).
    pub fn text(&self, path: &str) -> Result<String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()?;
        let code = response.status().as_u16();
        let text = response.text()?;
        if code != 200 {
            bail!("GET {path} answered {code}: {text}");
        }
        Ok(text)
    }

    /// GET that must answer 200.
    pub fn get(&self, path: &str) -> Result<serde_json::Value> {
        match self.send("GET", path, None)? {
            (200, v) => Ok(v),
            (code, v) => bail!("GET {path} answered {code}: {v}"),
        }
    }
}

/// A plain HTTP client for members' surfaces.
pub fn member_call(
    method: &str,
    url: &str,
    body: Option<&serde_json::Value>,
) -> Result<(u16, serde_json::Value)> {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut req = http.request(reqwest::Method::from_bytes(method.as_bytes())?, url);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    status_and_json(req)
}

/// Sends `req` and answers the status code and the body as JSON (`null` when it is not JSON).
fn status_and_json(req: reqwest::blocking::RequestBuilder) -> Result<(u16, serde_json::Value)> {
    let resp = req.send()?;
    let status = resp.status().as_u16();
    let text = resp.text()?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    ))
}

/// Turns a fault of a single-member agent on or off (`POST <agent>/faults/<fault>`), e.g.
/// `unreachable`: the agent keeps running but renews no lease.
pub fn set_agent_fault(agent: &Agent, fault: &str, enabled: bool) {
    let url = format!("{}/faults/{fault}", agent.url);
    match member_call("POST", &url, Some(&serde_json::json!({"enabled": enabled}))) {
        Ok((200, _)) => {}
        other => panic!("setting {fault}={enabled} on {}: {other:?}", agent.url),
    }
}

/// The RFC 3339 time at `pointer` in `v` (panics naming the pointer when it is missing).
pub fn time_at(v: &serde_json::Value, pointer: &str) -> chrono::DateTime<chrono::Utc> {
    let s = v
        .pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} in {v}"));
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{pointer} = {s}: {e}"))
        .with_timezone(&chrono::Utc)
}

/// Fails the test loudly when kubectl is missing: `scripts/setup.sh` (which
/// `.ci/run` calls) installs it. A kubectl test never passes by skipping.
pub fn require_kubectl() {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "kubectl is not installed: run scripts/setup.sh (the kubectl tests need it)"
    );
}

/// Runs kubectl against a server with its own discovery cache directory.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache_dir: tempfile::TempDir,
}

impl Kubectl {
    /// A kubectl for `server`.
    pub fn new(server: &Server) -> Result<Kubectl> {
        Ok(Kubectl {
            kubeconfig: server.kubeconfig(),
            cache_dir: tempfile::tempdir()?,
        })
    }

    /// The command, with kubeconfig and cache dir set.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache_dir.path())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl and returns its output, whether it succeeded or not.
    pub fn output(&self, args: &[&str]) -> Result<Output> {
        Ok(self.command(args).output()?)
    }

    /// Runs kubectl and returns stdout; fails with stderr when kubectl fails.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }
}

/// What one look of [`eventually`] answers: done, with a value, or not yet, with what it saw.
/// The twin of `flotilla_server::testing::Outcome`.
pub trait Outcome {
    /// What the wait gives back once it is over.
    type Value;
    /// `Ok(value)` ends the wait; `Err(seen)` tells what this look saw instead.
    fn into_outcome(self) -> Result<Self::Value, String>;
}

/// `Some(value)` ends the wait; `None` is "not yet" and tells nothing more.
impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_string())
    }
}

/// `Ok(value)` ends the wait; `Err(seen)` is "not yet", and the last `seen` is in the panic.
impl<T, E: std::fmt::Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Looks at `f` every 50 ms until it answers `Some(value)` or `Ok(value)`; `Err` names `what`
/// and what the last look saw once `deadline` has passed.
fn poll<O: Outcome>(what: &str, deadline: Duration, mut f: impl FnMut() -> O) -> Result<O::Value> {
    let until = Instant::now() + deadline;
    loop {
        let seen = match f().into_outcome() {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if Instant::now() >= until {
            bail!("waited {deadline:?} for {what}; last seen: {seen}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The end-to-end tests' one wait: looks at `f` every 50 ms until it answers `Some(value)` or
/// `Ok(value)`, and returns the value. The blocking twin of
/// `flotilla_server::testing::eventually`, same signature (these tests are not async).
///
/// # Panics
/// When `deadline` has passed and `f` still says "not yet": the message names `what` and what
/// the last look saw.
pub fn eventually<O, F>(what: &str, deadline: Duration, f: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> O,
{
    poll(what, deadline, f).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The failover scenarios the repository ships (`examples/`).
pub fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Helpers the benchmarks share.
pub mod bench {
    use super::{Outcome, Result};
    use std::time::Duration;

    /// Like [`eventually`](crate::eventually), but gives up without panicking: a benchmark
    /// reports what it measured even when a run does not finish. The `Err` names `what` and
    /// what the last look saw.
    pub fn until<O: Outcome>(
        what: &str,
        deadline: Duration,
        f: impl FnMut() -> O,
    ) -> Result<O::Value> {
        super::poll(what, deadline, f)
    }

    /// `PERF_RECORD=<file>`: a `perf record` (DWARF call graphs, 199 Hz) of the processes
    /// `pids` (comma-separated), running until [`perf_stop`]; `None` when the variable is
    /// unset.
    pub fn perf_record(pids: &str) -> Option<std::process::Child> {
        let out = std::env::var("PERF_RECORD").ok()?;
        let child = std::process::Command::new("perf")
            .args([
                "record",
                "--call-graph",
                "dwarf,16384",
                "-F",
                "199",
                "-o",
                &out,
                "-p",
                pids,
            ])
            .stdout(std::process::Stdio::null())
            .spawn();
        match child {
            Ok(c) => Some(c),
            Err(e) => panic!("starting perf record: {e}"),
        }
    }

    /// Stops a [`perf_record`] (SIGINT, so that it writes its file) and waits for it.
    pub fn perf_stop(perf: Option<std::process::Child>) {
        if let Some(mut perf) = perf {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &perf.id().to_string()])
                .status();
            let _ = perf.wait();
        }
    }

    /// Creates the Deployments `make(0..n)` in `default` from 8 threads, as a benchmark's
    /// setup does. A create whose answer was lost is sent again (a 409 then says it was made).
    pub fn post_deployments(
        api: &crate::ApiClient,
        n: u64,
        make: impl Fn(u64) -> serde_json::Value + Sync,
    ) {
        const WRITERS: u64 = 8;
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let make = &make;
                s.spawn(move || {
                    for i in (w..n).step_by(WRITERS as usize) {
                        let deployment = make(i);
                        let (code, body) = until(
                            &format!("Deployment {} created", deployment["metadata"]["name"]),
                            Duration::from_secs(600),
                            || {
                                api.send(
                                    "POST",
                                    "/apis/apps/v1/namespaces/default/deployments",
                                    Some(&deployment),
                                )
                            },
                        )
                        .unwrap_or_else(|e| panic!("{e:#}"));
                        assert!(code == 201 || code == 409, "{code} {body}");
                    }
                });
            }
        });
    }

    /// One agent process simulating `members` pull members of `server` (`--sim-members`),
    /// joined with the server's join token, its data in `dir`; `extra` goes to the agent too.
    pub fn sim_members_agent(
        server: &crate::Server,
        dir: &std::path::Path,
        members: u64,
        extra: &[&str],
    ) -> crate::Agent {
        let ca = server.data_dir.join("tls.crt").display().to_string();
        let token = server.data_dir.join("join.token").display().to_string();
        let dir = dir.display().to_string();
        let members = members.to_string();
        let mut args = vec![
            "--server",
            &server.url,
            "--ca-file",
            &ca,
            "--token-file",
            &token,
            "--data-dir",
            &dir,
            "--sim-members",
            &members,
        ];
        args.extend_from_slice(extra);
        crate::Agent::start(&args).unwrap_or_else(|e| panic!("starting the agent: {e:#}"))
    }

    /// An integer knob from the environment, or its default.
    pub fn env_or(name: &str, default: u64) -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// utime + stime of a process, in seconds (0 when it cannot be read).
    pub fn cpu_seconds(pid: u32) -> f64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0.0;
        };
        let Some(after) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
            return 0.0;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Processes whose parent is `pid` (from /proc; empty when it cannot be read).
    pub fn children(pid: u32) -> Vec<u32> {
        let path = format!("/proc/{pid}/task/{pid}/children");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}
