//! `flotilla-server`: parses flags, sets up logging, starts the control plane and stops it
//! gracefully on SIGTERM or Ctrl-C.

/// mimalloc: the control loops allocate and free many small JSON values; glibc's malloc spent
/// a quarter of the server's CPU on them under load (see docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, ValueEnum};
use flotilla_server::app::{
    self, ControllerSettings, ServerConfig, StoreBackend, Tls, DEFAULT_MIN_FLUSH_INTERVAL,
};
use flotilla_server::profile::{Detection, DetectionFlags};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Plain,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StoreFlag {
    Sled,
    Memory,
    Log,
    Etcd,
}

/// How to reach etcd, for serving (`--store etcd`) and for `migrate-store`.
#[derive(Debug, clap::Args)]
struct EtcdFlags {
    /// etcd's client URLs, comma-separated (--store etcd), e.g.
    /// http://127.0.0.1:2379,http://127.0.0.1:22379.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// PEM CA bundle that verifies etcd's server certificates (etcdctl's --cacert).
    #[arg(long)]
    etcd_cacert: Option<PathBuf>,
    /// PEM client certificate for etcd's client-certificate authentication (etcdctl's --cert).
    #[arg(long, requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// PEM private key of --etcd-cert (etcdctl's --key).
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// Every key of this fleet in etcd lies under this prefix.
    #[arg(long, default_value = flotilla_server::store::etcd::connect::DEFAULT_PREFIX)]
    etcd_prefix: String,
}

impl EtcdFlags {
    fn config(&self) -> flotilla_server::store::etcd::EtcdConfig {
        flotilla_server::store::etcd::EtcdConfig {
            endpoints: self.etcd_endpoints.clone(),
            ca_file: self.etcd_cacert.clone(),
            cert_file: self.etcd_cert.clone(),
            key_file: self.etcd_key.clone(),
            prefix: self.etcd_prefix.clone(),
            ..flotilla_server::store::etcd::EtcdConfig::default()
        }
    }
}

/// What `flotilla-server migrate-store` reads.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum MigrateFrom {
    Sled,
    Log,
}

/// What `flotilla-server migrate-store` writes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum MigrateTo {
    Etcd,
}

/// Tools beside serving.
#[derive(Debug, clap::Subcommand)]
enum Tool {
    /// Copies a single server's store (its --data-dir; stop the server first) into an empty
    /// etcd prefix, every object as it is (uids, owners, finalizers kept), so that servers
    /// started with --store etcd carry on with it.
    MigrateStore {
        /// The engine the server ran with.
        #[arg(long, value_enum, default_value = "sled")]
        from: MigrateFrom,
        /// Where to copy it.
        #[arg(long, value_enum, default_value = "etcd")]
        to: MigrateTo,
        /// The server's data directory.
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
        #[command(flatten)]
        etcd: EtcdFlags,
    },
}

/// Flotilla's control plane.
#[derive(Debug, Parser)]
#[command(
    name = "flotilla-server",
    version,
    args_conflicts_with_subcommands = true
)]
struct Flags {
    #[command(subcommand)]
    tool: Option<Tool>,
    /// Address to serve the API on.
    #[arg(long, env = "FLOTILLA_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// Directory of the store, admin token and kubeconfig.
    #[arg(long, env = "FLOTILLA_DATA_DIR", default_value = "./flotilla-data")]
    data_dir: PathBuf,
    /// Log format.
    #[arg(long, value_enum, default_value = "plain")]
    log_format: LogFormat,
    /// Storage engine (memory loses everything at exit; log keeps every object in memory and
    /// writes a write-ahead log and snapshots under <data-dir>/store-log).
    /// etcd keeps the store in an etcd cluster shared by several servers (--etcd-endpoints).
    #[arg(long, value_enum, default_value = "sled")]
    store: StoreFlag,
    /// How to reach etcd (--store etcd).
    #[command(flatten)]
    etcd: EtcdFlags,
    /// How often the servers compact etcd's history, keeping one interval of it (Kubernetes'
    /// --etcd-compaction-interval); 0 turns compaction off. Leave etcd's own
    /// auto-compaction off.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    etcd_compaction_interval: Duration,
    /// With --store etcd: run the controllers only while this server is the elected leader of
    /// the servers that share the store (the API is served by all). Set it false only for a
    /// fleet of exactly one server. The local stores always have one server, which leads.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// How long a leader's term lasts without renewal: another server leads at most this long
    /// (plus a second) after the leader died.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15s")]
    leader_elect_lease_duration: Duration,
    /// A leader that could not renew for this long stops its controllers. Default 10s, or
    /// 2/3 of a lease duration other than 15s.
    #[arg(long, value_parser = humantime::parse_duration)]
    leader_elect_renew_deadline: Option<Duration>,
    /// How often the leader renews and a candidate retries. Default 2s, or 2/15 of a lease
    /// duration other than 15s.
    #[arg(long, value_parser = humantime::parse_duration)]
    leader_elect_retry_period: Option<Duration>,
    /// PEM certificate for HTTPS (with --tls-key). Without it the server serves HTTPS with a
    /// self-signed certificate it generates in the data directory.
    #[arg(long, requires = "tls_key", conflicts_with = "plain_http")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS (with --tls-cert).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP instead of HTTPS (kubectl sends no token over plain HTTP).
    #[arg(long)]
    plain_http: bool,
    /// Largest accepted request body in bytes.
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    max_request_bytes: usize,
    /// Deadline of a non-watch request, in seconds.
    #[arg(long, default_value_t = 60)]
    request_timeout_seconds: u64,
    /// A client must send a request's headers within this many seconds of starting it (or of
    /// opening the connection); slower connections are closed.
    #[arg(long, default_value_t = 10)]
    header_read_timeout_seconds: u64,
    /// A request's body must arrive within this many seconds of the first read of it (408).
    #[arg(long, default_value_t = 30)]
    body_read_timeout_seconds: u64,
    /// Open client connections served at once; connections past it are closed at accept.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Watch events kept for resuming watches (older resourceVersions answer 410).
    #[arg(long, default_value_t = 10_000)]
    event_log_capacity: usize,
    /// Bytes of event JSON kept for resuming watches: every event holds a whole object, so
    /// large objects shorten the log below --event-log-capacity.
    #[arg(long, default_value_t = flotilla_server::store::DEFAULT_EVENT_LOG_MAX_BYTES)]
    event_log_max_bytes: usize,
    /// The store's group commit rounds start at least this many microseconds apart: writes
    /// arriving meanwhile share the round's transaction and sync (an idle store writes a lone
    /// write at once).
    #[arg(long, default_value_t = DEFAULT_MIN_FLUSH_INTERVAL.as_micros() as u64)]
    store_min_flush_interval_us: u64,
    /// Bytes (of stored JSON) of decoded objects the store keeps for reads, so the
    /// controllers' many reads of a hot object do not parse it again; 0 keeps none.
    #[arg(long, default_value_t = flotilla_server::store::local::object_cache::DEFAULT_BUDGET)]
    store_object_cache_bytes: usize,
    /// Push members are probed this often [default: 10s; 500ms with --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_status_update_frequency: Option<Duration>,
    /// A not-True probe must last this long before Ready turns False [default: 30s; 2s with
    /// --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_failure_threshold: Option<Duration>,
    /// A True probe must last this long before Ready turns True [default: 30s; 1s with
    /// --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_success_threshold: Option<Duration>,
    /// Second-scale failure detection for demos and tests: monitor period 300ms, grace
    /// periods 2s (startup 5s), eviction timeout 4s (from the last lease renewal), default
    /// tolerations 0 s, eviction startup grace 2s; push members probed every 500ms, failure
    /// threshold 2s, success threshold 1s. NOT FOR PRODUCTION: a member that misses two seconds of lease
    /// renewals is failed over. Timing flags given explicitly still win.
    #[arg(long)]
    fast_failover: bool,
    /// Pull members' leases are checked this often [default: 5s; 300ms with --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_monitor_period: Option<Duration>,
    /// A pull member silent this long turns Ready Unknown; agents without timing flags renew
    /// their leases within a quarter of it [default: 40s; 2s with --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_monitor_grace_period: Option<Duration>,
    /// Like --cluster-monitor-grace-period, for members that never posted a status
    /// [default: 60s; 5s with --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    cluster_startup_grace_period: Option<Duration>,
    /// Self-fencing: an exactly-once binding's replacement waits until the failed member's last
    /// lease renewal plus this long. Must be at least the agents' `--fence-after` plus the clock
    /// offset allowed between server and agents (docs/failover.md, "Safety: self-fencing").
    #[arg(long, value_parser = humantime::parse_duration, default_value = "45s")]
    member_fence_after: Duration,
    /// A member not Ready this long gets the NoExecute taint [default: 5m; 1s with
    /// --fast-failover].
    #[arg(long, value_parser = humantime::parse_duration)]
    failover_eviction_timeout: Option<Duration>,
    /// Add NoExecute taints automatically (false leaves them to ClusterTaintPolicies and users;
    /// the NoSchedule taints stay).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_automatic_no_execute_taints: bool,
    /// Timeout of one probe of a push member.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    member_probe_timeout: Duration,
    /// Run the taint manager, which evicts workloads from clusters with NoExecute taints.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_taint_manager: bool,
    /// Let the taint manager evict (false: it runs and decides nothing).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_no_execute_taint_eviction: bool,
    /// Karmada feature gates: `Failover=true|false,GracefulEviction=true|false` (both on).
    #[arg(long, default_value = "")]
    feature_gates: flotilla_server::feature_gates::FeatureGates,
    /// How long an eviction task keeps the old copy when its policy sets no grace period.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    graceful_eviction_timeout: Duration,
    /// Application failover: a cluster the workload left is not chosen again for it this long
    /// after the old copy went.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m")]
    application_failover_block_period: Duration,
    /// Application failover: the second move in a row waits this long after the first, each
    /// further one twice as long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    application_failover_backoff: Duration,
    /// Application failover: the longest wait between two moves in a row.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    application_failover_max_backoff: Duration,
    /// Application failover: moves in a row without the workload turning Healthy, after which
    /// it stays where it is and the binding says so (0: no bound).
    #[arg(long, default_value_t = 3)]
    application_failover_max_moves: u32,
    /// Eviction brake: failed clusters let out per second in a region that is Normal; once
    /// out, all of a cluster's bindings go, each at its own toleration (0 stops them). The
    /// first failed cluster goes at once.
    #[arg(long, default_value_t = 0.1, value_parser = parse_rate)]
    cluster_eviction_rate: f64,
    /// Eviction brake: failed clusters let out per second in a region with more than
    /// --unhealthy-cluster-threshold of its clusters (or of the fleet's) not Ready.
    #[arg(long, default_value_t = 0.01, value_parser = parse_rate)]
    secondary_cluster_eviction_rate: f64,
    /// Eviction brake: an optional ceiling, in evictions (bindings) per second per region, on
    /// the evictions of failed clusters: Karmada's pacing on top of the clusters' (unset: no
    /// ceiling; 0 stops them).
    #[arg(long, value_parser = parse_rate)]
    resource_eviction_rate: Option<f64>,
    /// Eviction brake: the --resource-eviction-rate ceiling in a partially disrupted region
    /// (unset: --resource-eviction-rate's).
    #[arg(long, value_parser = parse_rate, requires = "resource_eviction_rate")]
    secondary_resource_eviction_rate: Option<f64>,
    /// Partition brake: the share of not-Ready clusters above which a region (or the fleet)
    /// is partially disrupted (at least 3 clusters not Ready).
    #[arg(long, default_value_t = 0.55, value_parser = parse_share)]
    unhealthy_cluster_threshold: f64,
    /// Partition brake: a fleet of at least this many clusters is large (see
    /// --large-fleet-partition-threshold).
    #[arg(long, default_value_t = 10)]
    large_fleet_size: usize,
    /// Partition brake: evictions stop when more than this share of a large fleet is not
    /// Ready (in any fleet, when every cluster is not Ready).
    #[arg(long, default_value_t = 0.7, value_parser = parse_share)]
    large_fleet_partition_threshold: f64,
    /// Partition brake: pace evictions at the rates above (false: no pacing; the stops of a
    /// fully disrupted fleet and of the startup grace stay).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_eviction_rate_limit: bool,
    /// Partition brake: nothing is evicted this long after the server starts (default: the
    /// --cluster-monitor-grace-period).
    #[arg(long, value_parser = humantime::parse_duration)]
    eviction_startup_grace_period: Option<Duration>,
    /// Purge mode of cluster failovers whose policy has no `failover.cluster`: Graciously
    /// (alias Gracefully), Immediately (alias Directly) or Never.
    #[arg(long, default_value = "Graciously", value_parser = parse_purge_mode)]
    no_execute_taint_eviction_purge_mode: flotilla_api::policy::PurgeMode,
    /// Also start this many simulated member clusters (member1..memberN) that join in pull
    /// mode through a `flotilla-agent` process (the binary beside this one).
    #[arg(long, default_value_t = 0)]
    sim_members: u32,
    /// Pod startup delay of the simulated members, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    sim_pod_startup_delay_ms: u64,
    /// An extra API (`group/version/Kind`) the simulated members serve besides the built-in
    /// kinds, so bindings of that kind pass the APIEnablement filter; repeatable.
    #[arg(long = "sim-api", value_name = "G/V/KIND")]
    sim_apis: Vec<String>,
    /// How often the simulated members report their Cluster status (resource summary
    /// included), in milliseconds. Unset, they follow this server: a quarter of
    /// `--cluster-monitor-grace-period`, at most 10 s (docs/members.md).
    #[arg(long)]
    sim_cluster_status_update_frequency_ms: Option<u64>,
    /// How often the simulated members renew their Leases, in milliseconds. Unset, they follow
    /// this server: a quarter of `--cluster-monitor-grace-period`, at most 10 s; a value over
    /// that gives every member the `LeaseRenewalTooSlow` condition.
    #[arg(long)]
    sim_lease_renew_interval_ms: Option<u64>,
    /// How often the status of Works on push members is read back from the member.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    push_status_period: Duration,
    /// How often the scheduler looks at every binding again. Cluster changes (a join, a lost
    /// taint, a deletion) reach the bindings they concern at once and a binding that could not
    /// be placed is retried every 5 s, so this pass is only a safety net; it costs a scheduling
    /// pass over every binding (at 20,000 bindings a 15 s period kept the scheduler busy for
    /// good).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    scheduler_resync_period: Duration,
    /// Run the API alone, without controllers.
    #[arg(long)]
    no_controllers: bool,
    /// Threads of the controllers' own runtime (default: one per core). The API is served by
    /// another runtime with one thread per core, so a request never waits behind the
    /// controllers' work (their catch-up after a restart included); the operating system
    /// shares the cores between the two.
    #[arg(long)]
    controller_threads: Option<usize>,
    /// tolerationSeconds of the not-ready NoExecute toleration added to policies [default:
    /// 300; 0 with --fast-failover].
    #[arg(long)]
    default_not_ready_toleration_seconds: Option<i64>,
    /// tolerationSeconds of the unreachable NoExecute toleration added to policies [default:
    /// 300; 0 with --fast-failover].
    #[arg(long)]
    default_unreachable_toleration_seconds: Option<i64>,
}

fn parse_purge_mode(s: &str) -> Result<flotilla_api::policy::PurgeMode, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("{s:?}: expected Graciously, Gracefully, Immediately, Directly or Never")
    })
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!("{s:?}: expected a number per second, 0 or more")),
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("{s:?}: expected a share above 0 and at most 1")),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Logs go to stderr; stdout carries only the "listening on" line.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    // A panic is logged once, as a structured error (a request handler's panic is also
    // answered as a 500 Status by the API's catch-panic layer).
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "a thread panicked");
    }));
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

/// Runs a tool and reports what it did.
async fn run_tool(tool: Tool) -> anyhow::Result<()> {
    match tool {
        Tool::MigrateStore {
            from,
            to: MigrateTo::Etcd,
            data_dir,
            etcd,
        } => {
            use flotilla_server::store::{
                etcd::EtcdStore, migrate_store, KvStore, Store, StoreConfig,
            };
            let source = match from {
                MigrateFrom::Sled => {
                    let store =
                        KvStore::open_sled(&data_dir.join("store"), StoreConfig::default())?;
                    let kinds = store.kinds();
                    (store as std::sync::Arc<dyn Store>, kinds)
                }
                MigrateFrom::Log => {
                    let store =
                        KvStore::open_log(&data_dir.join("store-log"), StoreConfig::default())?;
                    let kinds = store.kinds();
                    (store as std::sync::Arc<dyn Store>, kinds)
                }
            };
            let target = EtcdStore::open(
                &etcd.config(),
                StoreConfig::default(),
                flotilla_server::store::etcd::EtcdStoreOptions {
                    compaction_interval: Duration::ZERO,
                    // Dependents may come before their owners: nothing is collected meanwhile.
                    garbage_collection: flotilla_server::store::etcd::Collection::Off,
                    ..flotilla_server::store::etcd::EtcdStoreOptions::default()
                },
            )
            .await?;
            let migrated = migrate_store::migrate(source.0.as_ref(), &source.1, &target).await?;
            source.0.close().await?;
            target.close().await?;
            println!(
                "copied {} objects of {} kinds from {} into etcd prefix {}",
                migrated.objects,
                migrated.kinds.len(),
                data_dir.display(),
                etcd.etcd_prefix
            );
            for (kind, n) in migrated.kinds {
                println!("  {kind}: {n}");
            }
            Ok(())
        }
    }
}

/// Two runtimes: the API's (this thread and one worker per core) and the controllers'.
fn main() -> anyhow::Result<()> {
    let flags = parse_flags(std::env::args_os()).unwrap_or_else(|e| e.exit());
    init_logging(flags.log_format);
    if let Some(tool) = flags.tool {
        return tokio::runtime::Runtime::new()?.block_on(run_tool(tool));
    }
    let mut controllers = tokio::runtime::Builder::new_multi_thread();
    controllers.thread_name("controllers").enable_all();
    if let Some(n) = flags.controller_threads {
        controllers.worker_threads(n.max(1));
    }
    let controllers = controllers.build()?;
    let api = tokio::runtime::Builder::new_multi_thread()
        .thread_name("api")
        .enable_all()
        .build()?;
    let served = api.block_on(serve(flags, controllers.handle().clone()));
    // Every controller task was stopped by the shutdown; what is left (a feed's sleep) goes.
    controllers.shutdown_timeout(Duration::from_secs(5));
    served
}

async fn serve(flags: Flags, controller_runtime: tokio::runtime::Handle) -> anyhow::Result<()> {
    let detection = Detection::profile(flags.fast_failover).with(DetectionFlags {
        probe_period: flags.cluster_status_update_frequency,
        failure_threshold: flags.cluster_failure_threshold,
        success_threshold: flags.cluster_success_threshold,
        monitor_period: flags.cluster_monitor_period,
        monitor_grace: flags.cluster_monitor_grace_period,
        startup_grace: flags.cluster_startup_grace_period,
        eviction_timeout: flags.failover_eviction_timeout,
        not_ready_toleration_seconds: flags.default_not_ready_toleration_seconds,
        unreachable_toleration_seconds: flags.default_unreachable_toleration_seconds,
    });
    if flags.fast_failover {
        tracing::warn!(
            ?detection,
            "--fast-failover: second-scale failure detection, for demos and tests only"
        );
    }
    let mut config = ServerConfig::new(flags.data_dir.clone());
    config.listen = flags.listen;
    config.store_backend = match flags.store {
        StoreFlag::Sled => StoreBackend::Sled,
        StoreFlag::Memory => StoreBackend::Memory,
        StoreFlag::Log => StoreBackend::Log,
        StoreFlag::Etcd => StoreBackend::Etcd,
    };
    config.etcd = flags.etcd.config();
    config.etcd_store.compaction_interval = flags.etcd_compaction_interval;
    let scaled = flotilla_server::leadership::LeaderElectionTiming::for_lease(
        flags.leader_elect_lease_duration,
    );
    let defaults = flotilla_server::leadership::LeaderElectionTiming::default();
    let base = if flags.leader_elect_lease_duration == defaults.lease_duration {
        defaults
    } else {
        scaled
    };
    config.leader_election = flotilla_server::leadership::LeaderElection {
        enabled: flags.leader_elect,
        timing: flotilla_server::leadership::LeaderElectionTiming {
            lease_duration: flags.leader_elect_lease_duration,
            renew_deadline: flags
                .leader_elect_renew_deadline
                .unwrap_or(base.renew_deadline),
            retry_period: flags.leader_elect_retry_period.unwrap_or(base.retry_period),
        },
        identity: None,
    };
    config.tls = match (
        flags.plain_http,
        flags.tls_cert.clone(),
        flags.tls_key.clone(),
    ) {
        (true, _, _) => Tls::Plain,
        (false, Some(cert), Some(key)) => Tls::Files { cert, key },
        _ => Tls::SelfSigned,
    };
    config.event_log_capacity = flags.event_log_capacity;
    config.event_log_max_bytes = flags.event_log_max_bytes;
    config.min_flush_interval = Duration::from_micros(flags.store_min_flush_interval_us);
    config.object_cache_bytes = flags.store_object_cache_bytes;
    config.limits.max_body_bytes = flags.max_request_bytes;
    config.limits.request_timeout = Duration::from_secs(flags.request_timeout_seconds);
    config.limits.header_read_timeout = Duration::from_secs(flags.header_read_timeout_seconds);
    config.limits.body_read_timeout = Duration::from_secs(flags.body_read_timeout_seconds);
    config.limits.max_connections = flags.max_connections;
    config.defaulting.not_ready_toleration_seconds = detection.not_ready_toleration_seconds;
    config.defaulting.unreachable_toleration_seconds = detection.unreachable_toleration_seconds;
    config.controllers = if flags.no_controllers {
        None
    } else {
        let mut c = ControllerSettings::default();
        c.health.status_update_frequency = detection.probe_period;
        c.health.thresholds.failure = detection.failure_threshold;
        c.health.thresholds.success = detection.success_threshold;
        c.health.monitor_period = detection.monitor_period;
        c.health.grace.monitor = detection.monitor_grace;
        c.health.grace.startup = detection.startup_grace;
        c.taints.eviction_timeout = detection.eviction_timeout;
        c.taints.automatic_no_execute = flags.enable_automatic_no_execute_taints;
        c.probe_timeout = flags.member_probe_timeout;
        c.push_status_period = flags.push_status_period;
        c.scheduler_resync = flags.scheduler_resync_period;
        c.taint_manager.enabled = flags.enable_taint_manager
            && flags.enable_no_execute_taint_eviction
            && flags.feature_gates.failover;
        c.taint_manager.graceful_eviction = flags.feature_gates.graceful_eviction;
        c.taint_manager.default_purge_mode = flags.no_execute_taint_eviction_purge_mode;
        c.graceful_eviction_timeout = flags.graceful_eviction_timeout;
        c.member_fence_after = flags.member_fence_after;
        c.application_failover.enabled = flags.feature_gates.failover;
        c.application_failover.block_period = flags.application_failover_block_period;
        c.application_failover.backoff = flags.application_failover_backoff;
        c.application_failover.max_backoff = flags.application_failover_max_backoff;
        c.application_failover.max_moves = flags.application_failover_max_moves;
        c.eviction_brake = flotilla_server::controllers::settings::BrakeSettings {
            rate_limit: flags.enable_eviction_rate_limit,
            cluster_rate: flags.cluster_eviction_rate,
            secondary_cluster_rate: flags.secondary_cluster_eviction_rate,
            resource_rate: flags.resource_eviction_rate,
            secondary_resource_rate: flags.secondary_resource_eviction_rate,
            unhealthy_threshold: flags.unhealthy_cluster_threshold,
            large_fleet_size: flags.large_fleet_size,
            large_fleet_threshold: flags.large_fleet_partition_threshold,
            startup_grace: flags
                .eviction_startup_grace_period
                .unwrap_or(detection.monitor_grace),
        };
        Some(c)
    };
    config.controller_runtime = Some(controller_runtime);
    let data_dir = config.data_dir.clone();
    let server = app::start(config).await?;
    println!("flotilla-server listening on {}", server.url());
    let mut members = if flags.sim_members > 0 {
        Some(spawn_sim_members(
            &flags,
            &server.url(),
            server.scheme,
            &data_dir,
        )?)
    } else {
        None
    };
    terminated().await;
    tracing::info!("shutting down");
    if let Some(child) = members.as_mut() {
        stop_child(child).await;
    }
    server.shutdown().await?;
    Ok(())
}

/// Starts `flotilla-agent --sim-members N` beside this binary, joined to this server.
fn spawn_sim_members(
    flags: &Flags,
    url: &str,
    scheme: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<tokio::process::Child> {
    let agent = std::env::current_exe()?.with_file_name("flotilla-agent");
    if !agent.exists() {
        anyhow::bail!(
            "--sim-members needs the flotilla-agent binary next to flotilla-server ({}); \
             build the whole workspace: cargo build --release --workspace",
            agent.display()
        );
    }
    let mut cmd = tokio::process::Command::new(agent);
    cmd.arg("--server")
        .arg(url)
        .arg("--token-file")
        .arg(data_dir.join("join.token"))
        .arg("--data-dir")
        .arg(data_dir.join("sim-members"))
        .arg("--sim-members")
        .arg(flags.sim_members.to_string())
        .arg("--member-prefix")
        .arg("member")
        .arg("--pod-startup-delay-ms")
        .arg(flags.sim_pod_startup_delay_ms.to_string())
        .args(
            flags
                .sim_apis
                .iter()
                .flat_map(|api| ["--sim-api", api.as_str()]),
        )
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--exit-on-stdin-close")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    if scheme == "https" {
        cmd.arg("--ca-file").arg(data_dir.join("tls.crt"));
    }
    // Only periods given explicitly are handed on: without them the agent takes the ones this
    // server advertises, like any agent started without timing flags.
    if let Some(ms) = flags.sim_cluster_status_update_frequency_ms {
        cmd.arg("--cluster-status-update-frequency-ms")
            .arg(ms.to_string());
    }
    if let Some(ms) = flags.sim_lease_renew_interval_ms {
        cmd.arg("--lease-renew-interval-ms").arg(ms.to_string());
    }
    let mut child = cmd.spawn()?;
    // The agent prints where its member surface (and fault API) listens: say it again and
    // record it in <data-dir>/sim-members.url for tests and scripts.
    if let Some(stdout) = child.stdout.take() {
        let url_file = data_dir.join("sim-members.url");
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("flotilla-agent listening on ") {
                    let _ = std::fs::write(&url_file, url.trim());
                    println!("flotilla-server simulated members on {}", url.trim());
                }
            }
        });
    }
    tracing::info!(members = flags.sim_members, "started simulated members");
    Ok(child)
}

/// SIGTERM, then SIGKILL after 10 s.
async fn stop_child(child: &mut tokio::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

/// The flags of `args`, with Kubernetes' forms for every boolean flag that defaults to true:
/// bare (`--leader-elect` is true) or `=value` (`--leader-elect=false`); a value after a space
/// is no value of theirs (pflag's rule).
fn parse_flags<I, T>(args: I) -> Result<Flags, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = Flags::command().mut_args(|arg| {
        let defaults_true = arg.get_default_values() == [std::ffi::OsStr::new("true")];
        if defaults_true && matches!(arg.get_action(), clap::ArgAction::Set) {
            arg.num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
        } else {
            arg
        }
    });
    Flags::from_arg_matches(&command.try_get_matches_from(args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The boolean flags that default to true take Kubernetes' forms: bare (`--leader-elect`,
    /// true) and `=value`; a value after a space is no value of theirs.
    #[test]
    fn boolean_flags_take_the_bare_form_as_kubernetes_does() {
        let parse = |args: &[&str]| {
            parse_flags(std::iter::once("flotilla-server").chain(args.iter().copied()))
        };
        for (args, want) in [
            (&[][..], true),
            (&["--leader-elect"][..], true),
            (&["--leader-elect=true"][..], true),
            (&["--leader-elect=false"][..], false),
        ] {
            let flags = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(flags.leader_elect, want, "{args:?}");
        }
        let flags = parse(&[
            "--enable-taint-manager",
            "--enable-automatic-no-execute-taints=false",
            "--enable-no-execute-taint-eviction",
            "--enable-eviction-rate-limit=false",
        ])
        .expect("the flags parse");
        assert!(flags.enable_taint_manager);
        assert!(!flags.enable_automatic_no_execute_taints);
        assert!(flags.enable_no_execute_taint_eviction);
        assert!(!flags.enable_eviction_rate_limit);
        assert!(
            parse(&["--leader-elect", "false"]).is_err(),
            "a value after a space is refused, not taken"
        );
    }
}
