//! Starting the agent: [`run`] turns an [`AgentConfig`] into running members (one, or
//! `sim_members` of them named `<prefix>1..N`, each with its own data directory), their sim
//! runtimes ticked by one driver (or, with [`RuntimeKind::Kube`], one member backed by a real
//! cluster's API: [`flotilla_member::kube`]), the member HTTP surface when `listen` is set, and
//! in pull mode each member's pull loops. The [`AgentHandle`] it answers gives the bound address and
//! the members, and stops everything cleanly (state flushed).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::member::Member;
use crate::pull::{self, PullOptions, PullTiming, Registration, ServerClient, ServerEndpoints};
use flotilla_member::kube::{ConnectError, KubeRuntime, KubeSettings};
use flotilla_member::sim::{SimConfig, SimDriver, SimRuntime};
use flotilla_member::{MemberRuntime, RuntimeError};
use flotilla_support::clock::{Clock, SystemClock};

/// What a member is: the embedded simulated cluster, or a real cluster's Kubernetes API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// The embedded simulated cluster (`flotilla_member::sim`).
    #[default]
    Sim,
    /// A real cluster, through its Kubernetes API (`flotilla_member::kube`).
    Kube,
}

/// Push (serve the member HTTP surface only) or pull (also register with a server and pull
/// Works).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The agent pulls its Works from the server.
    #[default]
    Pull,
    /// The server pushes Works to the member's HTTP surface.
    Push,
}

/// Everything [`run`] needs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Push or pull.
    pub mode: Mode,
    /// Which runtime backs the members.
    pub runtime: RuntimeKind,
    /// Kube runtime: the member's kubeconfig (`None`: `KUBECONFIG`, `~/.kube/config`, else
    /// the in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    /// Kube runtime: the kubeconfig context (`None`: its current context).
    pub kube_context: Option<String>,
    /// Server URL (pull mode), or several comma-separated (servers sharing one store: the
    /// agent talks to one at a time and moves to the next when it fails,
    /// [`crate::pull::endpoints`]).
    pub server: Option<String>,
    /// The member's name when the process hosts one.
    pub cluster_name: Option<String>,
    /// Host this many simulated members (0: one member named `cluster_name`).
    pub sim_members: usize,
    /// Prefix of the simulated members' names.
    pub member_prefix: String,
    /// Join token file (pull mode).
    pub token_file: Option<PathBuf>,
    /// Data directory (`<data-dir>/<name>` per member when hosting many).
    pub data_dir: PathBuf,
    /// Extra CA (PEM) to trust for the server.
    pub ca_file: Option<PathBuf>,
    /// Provider, region, zones, labels sent at registration.
    pub registration: Registration,
    /// Where to serve the member HTTP surface (required in push mode).
    pub listen: Option<SocketAddr>,
    /// The sim's knobs.
    pub sim: SimConfig,
    /// Pull loop periods.
    pub timing: PullTiming,
    /// Sim tick period.
    pub sim_tick: Duration,
    /// How often changed sim state is written.
    pub sim_save_every: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            mode: Mode::Pull,
            runtime: RuntimeKind::Sim,
            kubeconfig: None,
            kube_context: None,
            server: None,
            cluster_name: None,
            sim_members: 0,
            member_prefix: "member".into(),
            token_file: None,
            data_dir: PathBuf::from("flotilla-agent-data"),
            ca_file: None,
            registration: Registration::default(),
            listen: None,
            sim: SimConfig::default(),
            timing: PullTiming::default(),
            sim_tick: Duration::from_millis(100),
            sim_save_every: Duration::from_secs(1),
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is incomplete or contradictory.
    #[error("configuration: {0}")]
    Config(String),
    /// A data directory could not be created.
    #[error("creating data directory {path}")]
    DataDir {
        /// The directory.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The member cluster's API client could not be built.
    #[error("connecting to the Kubernetes API of {member}")]
    Connect {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: ConnectError,
    },
    /// A runtime could not be opened.
    #[error("opening the runtime of {member}")]
    Runtime {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: RuntimeError,
    },
    /// The server client could not be built.
    #[error("server client")]
    Client(#[source] Box<pull::ClientError>),
    /// A member's pull loops could not start.
    #[error("starting the pull loops of {member}")]
    Pull {
        /// The member.
        member: String,
        /// What failed.
        #[source]
        source: Box<pull::SpawnError>,
    },
    /// The listen address could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// A running agent.
pub struct AgentHandle {
    local_addr: Option<SocketAddr>,
    /// The servers of a pull agent, and the one it talks to.
    servers: Option<Arc<ServerEndpoints>>,
    members: Vec<Arc<Member>>,
    sims: Vec<Arc<SimRuntime>>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("local_addr", &self.local_addr)
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl AgentHandle {
    /// Where the member HTTP surface listens, if it does.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A pull agent's servers, the one in use and how often it switched (`None` in push mode).
    pub fn servers(&self) -> Option<&Arc<ServerEndpoints>> {
        self.servers.as_ref()
    }

    /// The hosted members, in name order.
    pub fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// One member by name.
    pub fn member(&self, name: &str) -> Option<&Arc<Member>> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Stops every loop and the HTTP surface, and writes every runtime's state.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let all = futures::future::join_all(self.tasks);
        match tokio::time::timeout(Duration::from_secs(10), all).await {
            Ok(results) => {
                for e in results.into_iter().filter_map(Result::err) {
                    tracing::error!(error = %e, "agent task failed");
                }
            }
            Err(_) => tracing::warn!("agent tasks did not stop within 10 s"),
        }
        for sim in &self.sims {
            if let Err(e) = sim.save() {
                tracing::error!(error = %flotilla_support::error_chain(&e), "saving sim state failed");
            }
        }
    }
}

/// The member names a config asks for.
pub fn member_names(config: &AgentConfig) -> Result<Vec<String>, StartError> {
    match config.runtime {
        RuntimeKind::Kube if config.sim_members > 0 => {
            return Err(StartError::Config(
                "--sim-members hosts simulated members; --runtime kube hosts one member, \
                 the cluster its kubeconfig names (--cluster-name)"
                    .into(),
            ));
        }
        RuntimeKind::Sim if config.kubeconfig.is_some() || config.kube_context.is_some() => {
            return Err(StartError::Config(
                "--kubeconfig and --context name a real member cluster: they need --runtime kube"
                    .into(),
            ));
        }
        _ => {}
    }
    if config.sim_members > 0 {
        if config.member_prefix.is_empty() {
            return Err(StartError::Config(
                "--member-prefix must not be empty".into(),
            ));
        }
        return Ok((1..=config.sim_members)
            .map(|i| format!("{}{i}", config.member_prefix))
            .collect());
    }
    match &config.cluster_name {
        Some(n) if !n.is_empty() => {
            let problems = flotilla_api::names::dns1123_label(n);
            if problems.is_empty() {
                Ok(vec![n.clone()])
            } else {
                Err(StartError::Config(format!(
                    "--cluster-name {n:?}: {}",
                    problems.join("; ")
                )))
            }
        }
        _ => Err(StartError::Config(
            "--cluster-name is required (or --sim-members N)".into(),
        )),
    }
}

/// Starts the agent.
pub async fn run(config: AgentConfig) -> Result<AgentHandle, StartError> {
    run_with_clock(config, Arc::new(SystemClock)).await
}

/// Starts the agent with an injected clock (tests).
pub async fn run_with_clock(
    config: AgentConfig,
    clock: Arc<dyn Clock>,
) -> Result<AgentHandle, StartError> {
    let names = member_names(&config)?;
    if config.mode == Mode::Push && config.listen.is_none() {
        return Err(StartError::Config("push mode needs --listen".into()));
    }
    let server = match (config.mode, &config.server) {
        (Mode::Pull, None) => {
            return Err(StartError::Config("pull mode needs --server".into()));
        }
        (Mode::Pull, Some(url)) => Some(
            ServerClient::new(
                url,
                config.ca_file.as_deref(),
                config.timing.request_timeout,
            )
            .map_err(|e| StartError::Client(Box::new(e)))?,
        ),
        (Mode::Push, _) => None,
    };
    let servers = server.as_ref().map(|s| s.endpoints().clone());
    let many = config.sim_members > 0;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut members = Vec::new();
    let mut sims = Vec::new();
    let mut dirs = Vec::new();
    for name in &names {
        let dir = if many {
            config.data_dir.join(name)
        } else {
            config.data_dir.clone()
        };
        std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        let runtime: Arc<dyn MemberRuntime> = match config.runtime {
            RuntimeKind::Sim => {
                let sim = SimRuntime::open(
                    config.sim.clone(),
                    clock.clone(),
                    Some(dir.join("sim-state.json")),
                )
                .map_err(|source| StartError::Runtime {
                    member: name.clone(),
                    source,
                })?;
                sims.push(sim.clone());
                sim
            }
            RuntimeKind::Kube => Arc::new(kube_runtime(&config, name).await?),
        };
        members.push(Member::new(name, runtime));
        dirs.push(dir);
    }

    let mut tasks = Vec::new();
    let mut local_addr = None;
    if let Some(addr) = config.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        local_addr = Some(
            listener
                .local_addr()
                .map_err(|source| StartError::Bind { addr, source })?,
        );
        let app = crate::member_api::router(&members, shutdown_rx.clone());
        let mut stop = shutdown_rx.clone();
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "member HTTP surface failed");
            }
        }));
    }
    if !sims.is_empty() {
        tasks.push(tokio::spawn(
            SimDriver::new(sims.clone(), config.sim_tick, config.sim_save_every)
                .run(shutdown_rx.clone()),
        ));
    }
    if let Some(server) = server {
        let options = PullOptions {
            server,
            join_token_file: config.token_file.clone(),
            registration: config.registration.clone(),
            timing: config.timing.clone(),
        };
        for (member, dir) in members.iter().zip(dirs) {
            let task = pull::spawn(
                member.clone(),
                dir,
                &options,
                clock.clone(),
                shutdown_rx.clone(),
            )
            .map_err(|source| StartError::Pull {
                member: member.name.clone(),
                source: Box::new(source),
            })?;
            tasks.push(task);
        }
    }
    tracing::info!(members = members.len(), mode = ?config.mode, runtime = ?config.runtime,
        listen = ?local_addr, servers = ?servers.as_ref().map(|s| s.urls()),
        "flotilla-agent started");
    Ok(AgentHandle {
        local_addr,
        servers,
        members,
        sims,
        shutdown,
        tasks,
    })
}

/// The kube runtime of the member `name`, on a client from the config's kubeconfig (or the
/// in-cluster service account). Nothing is asked of the member's API yet: a member whose API
/// is down still starts, registers and reports itself not ready.
async fn kube_runtime(config: &AgentConfig, name: &str) -> Result<KubeRuntime, StartError> {
    let client = flotilla_member::kube::client_from_kubeconfig(
        config.kubeconfig.as_deref(),
        config.kube_context.as_deref(),
    )
    .await
    .map_err(|source| StartError::Connect {
        member: name.to_string(),
        source,
    })?;
    let settings = KubeSettings {
        cluster: name.to_string(),
        ..KubeSettings::default()
    };
    KubeRuntime::new(client, settings).map_err(|source| StartError::Runtime {
        member: name.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn configs_are_checked_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let base = AgentConfig {
            data_dir: dir.path().to_path_buf(),
            ..AgentConfig::default()
        };
        let named = |name: &str| AgentConfig {
            cluster_name: Some(name.into()),
            ..base.clone()
        };
        assert_eq!(member_names(&named("member1")).unwrap(), ["member1"]);
        let many = AgentConfig {
            sim_members: 3,
            member_prefix: "edge-".into(),
            ..base.clone()
        };
        assert_eq!(member_names(&many).unwrap(), ["edge-1", "edge-2", "edge-3"]);
        let cases = [
            ("no name", base.clone(), "--cluster-name is required"),
            ("bad name", named("Not_A_Name"), "--cluster-name"),
            (
                "pull without server",
                named("m1"),
                "pull mode needs --server",
            ),
            (
                "push without listen",
                AgentConfig {
                    mode: Mode::Push,
                    ..named("m1")
                },
                "push mode needs --listen",
            ),
            (
                "bad server URL",
                AgentConfig {
                    server: Some("127.0.0.1:7070".into()),
                    ..named("m1")
                },
                "must start with http",
            ),
            (
                "an empty server in the list",
                AgentConfig {
                    server: Some("http://127.0.0.1:7070,,http://127.0.0.1:7071".into()),
                    ..named("m1")
                },
                "--server: element 2",
            ),
            (
                "kube with sim members",
                AgentConfig {
                    runtime: RuntimeKind::Kube,
                    ..many.clone()
                },
                "--runtime kube hosts one member",
            ),
            (
                "kubeconfig without kube",
                AgentConfig {
                    kubeconfig: Some(dir.path().join("kubeconfig")),
                    ..named("m1")
                },
                "need --runtime kube",
            ),
            (
                "context without kube",
                AgentConfig {
                    kube_context: Some("kind-m1".into()),
                    ..named("m1")
                },
                "need --runtime kube",
            ),
            (
                "missing kubeconfig",
                AgentConfig {
                    runtime: RuntimeKind::Kube,
                    mode: Mode::Push,
                    listen: Some("127.0.0.1:0".parse().unwrap()),
                    kubeconfig: Some(dir.path().join("no-such-kubeconfig")),
                    ..named("m1")
                },
                "kubeconfig",
            ),
        ];
        for (what, config, want) in cases {
            let err = run(config).await.unwrap_err();
            let chain = flotilla_support::error_chain(&err);
            assert!(chain.contains(want), "{what}: {chain}");
        }
    }

    #[tokio::test]
    async fn push_mode_serves_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let handle = run(AgentConfig {
            mode: Mode::Push,
            cluster_name: Some("m1".into()),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            data_dir: dir.path().to_path_buf(),
            ..AgentConfig::default()
        })
        .await
        .unwrap();
        let addr = handle.local_addr().unwrap();
        let body = reqwest::get(format!("http://{addr}/readyz"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "ok");
        assert_eq!(handle.members().len(), 1);
        handle.shutdown().await;
        assert!(
            dir.path().join("sim-state.json").exists(),
            "state written on shutdown"
        );
        assert!(reqwest::get(format!("http://{addr}/readyz")).await.is_err());
    }
}
