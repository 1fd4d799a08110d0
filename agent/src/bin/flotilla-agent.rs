//! `flotilla-agent`: parse flags (and `FLOTILLA_AGENT_*` environment variables), start
//! logging, run the agent until SIGTERM or Ctrl-C, then stop cleanly. The sim runtime's flags
//! are refused with `--runtime kube`, whose member is a real cluster.

/// mimalloc: the control loops allocate and free many small JSON values; glibc's malloc spent
/// a quarter of the server's CPU on them under load (see docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use flotilla_agent::app::{AgentConfig, Mode, RuntimeKind};
use flotilla_agent::pull::{PullTiming, Registration};
use flotilla_api::Quantity;
use flotilla_member::sim::SimConfig;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    Plain,
    Json,
}

/// Flotilla's member agent: a pull-mode agent for one or many (simulated) member clusters,
/// or for a real cluster (`--runtime kube`), or a push-mode member HTTP surface.
#[derive(Debug, Parser)]
#[command(name = "flotilla-agent", version)]
struct Args {
    /// pull: register with --server and pull Works; push: serve the member HTTP surface only.
    #[arg(long, value_enum, default_value = "pull", env = "FLOTILLA_AGENT_MODE")]
    mode: Mode,
    /// sim: an embedded simulated cluster; kube: a real cluster, through its Kubernetes API
    /// (--kubeconfig, else the in-cluster service account).
    #[arg(
        long,
        value_enum,
        default_value = "sim",
        env = "FLOTILLA_AGENT_RUNTIME"
    )]
    runtime: RuntimeKind,
    /// With --runtime kube: the member cluster's kubeconfig. Unset: KUBECONFIG or
    /// ~/.kube/config when there is one, else the pod's service account (in-cluster).
    #[arg(long, env = "FLOTILLA_AGENT_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// With --runtime kube: the kubeconfig context (unset: its current context).
    #[arg(long = "context", env = "FLOTILLA_AGENT_KUBE_CONTEXT")]
    kube_context: Option<String>,
    /// Flotilla server URL (https://... or http://...). Required in pull mode. Several servers
    /// sharing one store (etcd) are given comma-separated: the agent talks to one at a time and
    /// moves to the next when it fails (connection errors, timeouts, 5xx).
    #[arg(long, env = "FLOTILLA_AGENT_SERVER", value_parser = parse_servers)]
    server: Option<String>,
    /// This member's cluster name (unless --sim-members is given).
    #[arg(long, env = "FLOTILLA_AGENT_CLUSTER_NAME")]
    cluster_name: Option<String>,
    /// File holding the server's join token (used to register).
    #[arg(long, env = "FLOTILLA_AGENT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Where the credential, the applied-objects record and the sim state live.
    #[arg(
        long,
        default_value = "flotilla-agent-data",
        env = "FLOTILLA_AGENT_DATA_DIR"
    )]
    data_dir: PathBuf,
    /// PEM certificate(s) to trust for the server (e.g. <server-data-dir>/tls.crt).
    #[arg(long, env = "FLOTILLA_AGENT_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// Cloud provider reported at registration.
    #[arg(long, default_value = "", env = "FLOTILLA_AGENT_PROVIDER")]
    provider: String,
    /// Region reported at registration.
    #[arg(long, default_value = "", env = "FLOTILLA_AGENT_REGION")]
    region: String,
    /// Zone reported at registration (repeatable).
    #[arg(long = "zone", env = "FLOTILLA_AGENT_ZONES", value_delimiter = ',')]
    zones: Vec<String>,
    /// Cluster label k=v reported at registration (repeatable).
    #[arg(long = "label", env = "FLOTILLA_AGENT_LABELS", value_delimiter = ',', value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Serve the member HTTP surface here (required in push mode; port 0 picks one).
    #[arg(long, env = "FLOTILLA_AGENT_LISTEN")]
    listen: Option<SocketAddr>,
    /// Host N simulated members named <prefix>1..<prefix>N.
    #[arg(long, default_value_t = 0, env = "FLOTILLA_AGENT_SIM_MEMBERS")]
    sim_members: usize,
    /// Name prefix of the simulated members.
    #[arg(long, default_value = "member", env = "FLOTILLA_AGENT_MEMBER_PREFIX")]
    member_prefix: String,
    /// Nodes per simulated member.
    #[arg(long, default_value_t = 3, env = "FLOTILLA_AGENT_SIM_NODES")]
    sim_nodes: usize,
    /// Allocatable cpu per simulated node.
    #[arg(long, default_value = "8", value_parser = parse_quantity, env = "FLOTILLA_AGENT_SIM_NODE_CPU")]
    sim_node_cpu: Quantity,
    /// Allocatable memory per simulated node.
    #[arg(long, default_value = "32Gi", value_parser = parse_quantity, env = "FLOTILLA_AGENT_SIM_NODE_MEMORY")]
    sim_node_memory: Quantity,
    /// Allocatable pods per simulated node.
    #[arg(long, default_value = "110", value_parser = parse_quantity, env = "FLOTILLA_AGENT_SIM_NODE_PODS")]
    sim_node_pods: Quantity,
    /// How long a placed pod takes to become Running and Ready.
    #[arg(
        long,
        default_value_t = 1000,
        env = "FLOTILLA_AGENT_POD_STARTUP_DELAY_MS"
    )]
    pod_startup_delay_ms: u64,
    /// How long a Job's pod runs before it succeeds.
    #[arg(long, default_value_t = 2000, env = "FLOTILLA_AGENT_JOB_RUN_MS")]
    job_run_ms: u64,
    /// Kubernetes version the simulated members report.
    #[arg(
        long,
        default_value = "v1.32.0-sim",
        env = "FLOTILLA_AGENT_SIM_KUBERNETES_VERSION"
    )]
    sim_kubernetes_version: String,
    /// Extra API reported as served, GROUP/VERSION/KIND (repeatable; FlinkDeployment is always).
    #[arg(long = "sim-api", value_parser = parse_api, env = "FLOTILLA_AGENT_SIM_APIS", value_delimiter = ',')]
    sim_apis: Vec<(String, String)>,
    /// Self-fencing: with the lease not renewed for this long, the objects of Works asking for
    /// exactly-once placement are deleted (docs/failover.md, "Safety: self-fencing"). Keep it
    /// at most the server's `--member-fence-after`; `0s` never fences.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s", env = "FLOTILLA_AGENT_FENCE_AFTER")]
    fence_after: Duration,
    /// Lease renewal period, in milliseconds. Unset, the agent follows the server: the period
    /// it advertises on every answer (a quarter of its --cluster-monitor-grace-period, at most
    /// 10 s), and 10 s until it has answered. A period longer than the server asks for makes
    /// it mark the member LeaseRenewalTooSlow.
    #[arg(long, env = "FLOTILLA_AGENT_LEASE_RENEW_INTERVAL_MS")]
    lease_renew_interval_ms: Option<u64>,
    /// Cluster status reporting period, in milliseconds. Unset, the agent follows the server,
    /// as for --lease-renew-interval-ms.
    #[arg(long, env = "FLOTILLA_AGENT_CLUSTER_STATUS_UPDATE_FREQUENCY_MS")]
    cluster_status_update_frequency_ms: Option<u64>,
    /// Log format.
    #[arg(
        long,
        value_enum,
        default_value = "plain",
        env = "FLOTILLA_AGENT_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// Stop when standard input is closed (for agents started by a parent process that must
    /// not outlive it, like `flotilla-server --sim-members`).
    #[arg(long)]
    exit_on_stdin_close: bool,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not k=v")),
    }
}

/// Checks a `--server` list (one URL or several comma-separated) and keeps it as given.
fn parse_servers(s: &str) -> Result<String, String> {
    flotilla_agent::pull::endpoints::parse_list(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_quantity(s: &str) -> Result<Quantity, String> {
    Quantity::parse(s).map_err(|e| e.to_string())
}

fn parse_api(s: &str) -> Result<(String, String), String> {
    match s.rsplit_once('/') {
        Some((gv, kind)) if !gv.is_empty() && !kind.is_empty() => {
            Ok((gv.to_string(), kind.to_string()))
        }
        _ => Err(format!("{s:?} is not GROUP/VERSION/KIND")),
    }
}

impl Args {
    fn config(self) -> AgentConfig {
        let mut extra_apis = SimConfig::default().extra_apis;
        extra_apis.extend(self.sim_apis);
        AgentConfig {
            mode: self.mode,
            runtime: self.runtime,
            kubeconfig: self.kubeconfig,
            kube_context: self.kube_context,
            server: self.server,
            cluster_name: self.cluster_name,
            sim_members: self.sim_members,
            member_prefix: self.member_prefix,
            token_file: self.token_file,
            data_dir: self.data_dir,
            ca_file: self.ca_file,
            registration: Registration {
                provider: self.provider,
                region: self.region,
                zones: self.zones,
                labels: self.labels.into_iter().collect::<BTreeMap<_, _>>(),
            },
            listen: self.listen,
            sim: SimConfig {
                nodes: self.sim_nodes,
                node_cpu: self.sim_node_cpu,
                node_memory: self.sim_node_memory,
                node_pods: self.sim_node_pods,
                pod_startup_delay: Duration::from_millis(self.pod_startup_delay_ms),
                job_run: Duration::from_millis(self.job_run_ms),
                kubernetes_version: self.sim_kubernetes_version,
                extra_apis,
            },
            timing: PullTiming {
                lease_renew_interval: self
                    .lease_renew_interval_ms
                    .map(|ms| Duration::from_millis(ms.max(1))),
                fence_after: (!self.fence_after.is_zero()).then_some(self.fence_after),
                cluster_status_update_frequency: self
                    .cluster_status_update_frequency_ms
                    .map(|ms| Duration::from_millis(ms.max(1))),
                ..PullTiming::default()
            },
            ..AgentConfig::default()
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves when standard input reaches end of file: a parent that started the agent with a
/// pipe on stdin (as `flotilla-server --sim-members` does) has exited, even by SIGKILL.
async fn stdin_closed() {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The flags (by id) that describe the simulated cluster.
const SIM_FLAGS: [&str; 10] = [
    "sim_members",
    "member_prefix",
    "sim_nodes",
    "sim_node_cpu",
    "sim_node_memory",
    "sim_node_pods",
    "pod_startup_delay_ms",
    "job_run_ms",
    "sim_kubernetes_version",
    "sim_apis",
];

/// Why these flags cannot go together, if they cannot: the sim runtime's flags given (on the
/// command line or in the environment) with `--runtime kube`.
fn runtime_conflicts(matches: &clap::ArgMatches, runtime: RuntimeKind) -> Option<String> {
    if runtime != RuntimeKind::Kube {
        return None;
    }
    let given: Vec<String> = SIM_FLAGS
        .iter()
        .filter(|id| {
            matches!(
                matches.value_source(id),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
        })
        .map(|id| format!("--{}", id.replace('_', "-").replace("sim-apis", "sim-api")))
        .collect();
    (!given.is_empty()).then(|| {
        format!(
            "{} describe the simulated cluster: with --runtime kube the member is the real \
             cluster --kubeconfig names (its nodes, version and APIs are read from it)",
            given.join(", ")
        )
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    if let Some(problem) = runtime_conflicts(&matches, args.runtime) {
        eprintln!("flotilla-agent: {problem}");
        return ExitCode::FAILURE;
    }
    init_logging(args.log_format);
    let args_exit_on_stdin_close = args.exit_on_stdin_close;
    let handle = match flotilla_agent::run(args.config()).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("flotilla-agent: {}", flotilla_support::error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = handle.local_addr() {
        use std::io::Write;
        println!("flotilla-agent listening on http://{addr}");
        let _ = std::io::stdout().flush();
    }
    if args_exit_on_stdin_close {
        tokio::select! {
            _ = terminated() => {}
            _ = stdin_closed() => tracing::info!("stdin closed (the parent is gone)"),
        }
    } else {
        terminated().await;
    }
    tracing::info!("stopping");
    handle.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_flags_are_refused_with_the_kube_runtime() {
        let table: [(&[&str], Option<&str>); 5] = [
            (&["--runtime", "kube", "--kubeconfig", "k"], None),
            (&["--sim-nodes", "5"], None),
            (
                &[
                    "--runtime",
                    "kube",
                    "--sim-nodes",
                    "5",
                    "--sim-api",
                    "a/v1/K",
                ],
                Some("--sim-nodes, --sim-api describe the simulated cluster"),
            ),
            (
                &["--runtime", "kube", "--sim-members", "3"],
                Some("--sim-members describe"),
            ),
            // Defaults are not "given".
            (&["--runtime", "kube", "--mode", "push"], None),
        ];
        for (flags, want) in table {
            let argv = std::iter::once("flotilla-agent").chain(flags.iter().copied());
            let matches = Args::command()
                .try_get_matches_from(argv)
                .unwrap_or_else(|e| panic!("{flags:?}: {e}"));
            let args = Args::from_arg_matches(&matches).unwrap();
            let got = runtime_conflicts(&matches, args.runtime);
            match (got, want) {
                (None, None) => {}
                (Some(got), Some(want)) => assert!(got.contains(want), "{flags:?}: {got}"),
                (got, want) => panic!("{flags:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn server_takes_one_url_or_several_comma_separated() {
        let parse = |value: &str| {
            Args::command()
                .try_get_matches_from(["flotilla-agent", "--server", value])
                .map_err(|e| e.to_string())
                .and_then(|m| Args::from_arg_matches(&m).map_err(|e| e.to_string()))
                .map(|args| args.config().server)
        };
        // (value, the URLs of the endpoint set, or what the error says)
        let table: [(&str, Result<&[&str], &str>); 5] = [
            ("https://a:7070", Ok(&["https://a:7070"])),
            (
                "https://a:7070,https://b:7070",
                Ok(&["https://a:7070", "https://b:7070"]),
            ),
            ("https://a:7070,,https://b:7070", Err("element 2")),
            ("https://a:7070,", Err("element 2")),
            ("https://a:7070,b:7070", Err("must start with http")),
        ];
        for (value, want) in table {
            match (parse(value), want) {
                (Ok(Some(server)), Ok(urls)) => {
                    let set = flotilla_agent::pull::ServerEndpoints::parse(&server).unwrap();
                    assert_eq!(set.urls(), urls, "{value}");
                }
                (Err(e), Err(want)) => {
                    assert!(e.contains("--server"), "{value}: names the flag: {e}");
                    assert!(e.contains(want), "{value}: {e}");
                }
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }
}
