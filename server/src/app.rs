//! Starting and stopping the control plane: data directory, admin token and kubeconfig, the store
//! (migrated before anything is served), the API on a TCP listener (HTTP or HTTPS, with the
//! connection limits of [`crate::api::http::transport`]), and graceful shutdown (in-flight requests finish,
//! the store is flushed). The kind registry is loaded from the stored CRDs and kept in step with
//! them by a [`CrdFeed`] before the API serves. Tests start it on port 0 through [`start`] and stop
//! it through the returned [`ServerHandle`]. The controllers are the list
//! [`controllers::CONTROLLERS`], each built from one [`ControllerContext`] and started through one
//! spawn path, on the runtime [`ServerConfig::controller_runtime`] names: the binary gives them a
//! runtime of their own, so that their catch-up after a restart (every object listed and
//! reconciled again, long synchronous steps between awaits) never holds up a request; tests
//! leave them on the caller's runtime and its clock.
//!
//! With the etcd engine several servers share one store, and their credentials with it
//! ([`crate::fleet`]): the admin and join tokens come from the store (the data dir's files are
//! kept equal to them), the serving certificate is issued by the fleet's CA (written beside it
//! as `ca.crt`, which the kubeconfig trusts), and on every engine the member credentials follow
//! the store through a [`CredentialFeed`].

use crate::api::access::auth;
use crate::api::access::credential_feed::CredentialFeed;
use crate::api::http::transport::LimitAcceptor;
use crate::api::{self, ApiState, Limits};
use crate::controllers::failover::brake::EvictionBrake;
use crate::controllers::failover::brake_reading::BrakeSlot;
pub use crate::controllers::settings::ControllerSettings;
use crate::controllers::{self, ControllerContext, ControllerHandle, WiringError};
use crate::fleet::{self, FleetError};
use crate::kinds::{CrdFeed, KindRegistry};
use crate::leadership::leader_loop::{StartTerm, TermStopped};
use crate::leadership::{election_holder, Elector, LeaderElection, LeaderLoop, LeaderMetrics};
use crate::probes::kube::KubeMemberClient;
use crate::probes::{HttpMemberClient, MemberClients};
use crate::store::etcd::{Collection, EtcdConfig, EtcdStore, EtcdStoreOptions};
use crate::store::{KvStore, LogEngine, MemoryEngine, SledEngine, Store, StoreConfig, StoreError};
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_support::clock::{SharedClock, SystemClock};
use flotilla_support::files::write_private;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Default pacing of the store's group commit: under load, the writes of two milliseconds share
/// one sled transaction and one sync instead of paying for one each.
pub const DEFAULT_MIN_FLUSH_INTERVAL: Duration = Duration::from_millis(2);

/// Which store backend to use (`--store`): a local one over a key-value engine
/// ([`crate::store::local`]) or etcd ([`crate::store::etcd`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreBackend {
    /// sled under `<data-dir>/store` (durable; the default).
    Sled,
    /// In memory (lost at exit; for tests and demos).
    Memory,
    /// Every tree in memory, made durable by a write-ahead log and snapshots under
    /// `<data-dir>/store-log` (see `store::local::log_engine`).
    Log,
    /// An etcd cluster, shared with the fleet's other servers: [`ServerConfig::etcd`] says
    /// how to reach it (see `store::etcd`).
    Etcd,
}

/// How the API is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    /// Plain HTTP. kubectl does not send bearer tokens over plain HTTP, so only curl and
    /// other clients can authenticate.
    Plain,
    /// HTTPS with a self-signed certificate generated at first start
    /// (`<data-dir>/tls.crt`, `<data-dir>/tls.key`); the kubeconfig trusts it. The default.
    /// With the etcd engine the certificate is instead issued at every start by the fleet's
    /// CA, kept in the store ([`crate::fleet`]); `<data-dir>/ca.crt` is that CA, and the
    /// kubeconfig trusts it, so it trusts every server of the fleet.
    SelfSigned,
    /// HTTPS with the given PEM certificate and key.
    Files {
        /// Certificate (chain) in PEM.
        cert: PathBuf,
        /// Private key in PEM.
        key: PathBuf,
    },
}

/// Everything the server needs to start.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where the store, the admin token and the kubeconfig live.
    pub data_dir: PathBuf,
    /// Store backend.
    pub store_backend: StoreBackend,
    /// How to reach etcd (`StoreBackend::Etcd`): `--etcd-endpoints`, TLS files, prefix.
    pub etcd: EtcdConfig,
    /// The etcd engine's own knobs (`--etcd-compaction-interval`).
    pub etcd_store: EtcdStoreOptions,
    /// HTTP or HTTPS, and with which certificate.
    pub tls: Tls,
    /// Defaulting parameters (default tolerations).
    pub defaulting: DefaultingConfig,
    /// Request limits.
    pub limits: Limits,
    /// How many watch events the store keeps for resuming watches.
    pub event_log_capacity: usize,
    /// Bytes of event JSON the store keeps for resuming watches (beside the count).
    pub event_log_max_bytes: usize,
    /// The store's group commit rounds start at least this far apart.
    pub min_flush_interval: Duration,
    /// Bytes of decoded objects the store keeps for reads (0: none).
    pub object_cache_bytes: usize,
    /// Controller settings; `None` runs the API alone.
    pub controllers: Option<ControllerSettings>,
    /// Whether the controllers wait to be elected leader (`--leader-elect`; etcd only).
    pub leader_election: LeaderElection,
    /// The clock of the store, the API and every controller (a [`flotilla_support::clock::FakeClock`]
    /// in tests that drive time).
    pub clock: SharedClock,
    /// The tokio runtime the controllers run on; `None`: the caller's, the one that serves
    /// the API (tests, whose paused tokio clock must drive both). `flotilla-server` gives them
    /// one of their own (`--controller-threads`): a controller runs synchronous work between
    /// its awaits (decoding a listed kind, a reconcile's store reads and writes), and on a
    /// shared runtime a request waits behind all of it. On separate threads the operating
    /// system shares the cores between the two, and the median request during the
    /// controllers' catch-up is answered in milliseconds instead of seconds
    /// (docs/performance.md, "Restart").
    pub controller_runtime: Option<tokio::runtime::Handle>,
}

impl ServerConfig {
    /// Defaults: 127.0.0.1:7070, sled, HTTPS with a self-signed certificate, the wall clock.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            data_dir: data_dir.into(),
            store_backend: StoreBackend::Sled,
            etcd: EtcdConfig::default(),
            etcd_store: EtcdStoreOptions::default(),
            tls: Tls::SelfSigned,
            defaulting: DefaultingConfig::default(),
            limits: Limits::default(),
            event_log_capacity: 10_000,
            event_log_max_bytes: crate::store::DEFAULT_EVENT_LOG_MAX_BYTES,
            min_flush_interval: DEFAULT_MIN_FLUSH_INTERVAL,
            object_cache_bytes: crate::store::local::object_cache::DEFAULT_BUDGET,
            controllers: Some(ControllerSettings::default()),
            leader_election: LeaderElection::default(),
            clock: Arc::new(SystemClock),
            controller_runtime: None,
        }
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory or a file in it could not be written.
    #[error("cannot prepare {path}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store did not open (e.g. written by a newer Flotilla).
    #[error("cannot open the store")]
    Store(#[source] StoreError),
    /// The listen address is taken or not allowed.
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate or key is unusable.
    #[error("cannot load the TLS certificate and key")]
    Tls(#[source] std::io::Error),
    /// The self-signed certificate could not be generated.
    #[error("cannot generate a self-signed certificate: {0}")]
    Certificate(String),
    /// The fleet's shared tokens or CA (etcd engine) could not be had.
    #[error("cannot set up the fleet's shared credentials")]
    Fleet(#[source] FleetError),
    /// Metrics could not be registered.
    #[error("cannot register metrics")]
    Metrics(#[source] prometheus::Error),
    /// The HTTP client for members could not be built.
    #[error("cannot build the member client")]
    MemberClient(#[source] reqwest::Error),
    /// A controller could not be built.
    #[error("cannot build the controllers")]
    Controllers(#[source] WiringError),
    /// The leader election's flags break its rules.
    #[error("leader election: {0}")]
    LeaderElection(String),
}

/// A running server.
pub struct ServerHandle {
    /// The bound address.
    pub addr: SocketAddr,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The admin bearer token.
    pub admin_token: String,
    /// The store (for in-process tests).
    pub store: Arc<dyn Store>,
    shutdown: Option<oneshot::Sender<()>>,
    stopping: tokio::sync::watch::Sender<bool>,
    controllers: Vec<ControllerHandle>,
    /// The controllers' campaign and terms, when several servers may share the store.
    leader: Option<LeaderLoop>,
    crd_feed: Option<CrdFeed>,
    credential_feed: Option<CredentialFeed>,
    task: JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// The server's base URL.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, then flushes and closes the store.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        let _ = self.stopping.send(true);
        for c in self.controllers.drain(..) {
            c.stop().await;
        }
        if let Some(leader) = self.leader.take() {
            // Stops this term's controllers, then resigns: the next server leads at once.
            leader.join().await;
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let served = (&mut self.task)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Some(feed) = self.crd_feed.take() {
            feed.stop().await;
        }
        if let Some(feed) = self.credential_feed.take() {
            feed.stop().await;
        }
        if let Err(e) = self.store.close().await {
            tracing::error!(error = %e, "closing the store failed");
        }
        served
    }
}

fn data_err(path: &Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
    move |source| StartError::DataDir {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads `<data-dir>/<file>` (e.g. `admin.token`), creating it (mode 0600) with a fresh token
/// at first start.
pub fn ensure_token(data_dir: &Path, file: &str) -> Result<String, StartError> {
    let path = data_dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(data_err(&path)(e)),
    }
    let token = auth::generate_token();
    write_private(&path, token.as_bytes()).map_err(data_err(&path))?;
    Ok(token)
}

/// The kubeconfig that lets kubectl talk to this server with the admin token.
pub fn kubeconfig(server_url: &str, token: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine as _;
    let cluster = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n    server: {server_url}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => format!("    server: {server_url}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: flotilla\n  cluster:\n{cluster}\
         users:\n- name: flotilla-admin\n  user:\n    token: {token}\n\
         contexts:\n- name: flotilla\n  context:\n    cluster: flotilla\n    user: flotilla-admin\n    namespace: default\n\
         current-context: flotilla\n"
    )
}

/// Returns `<data-dir>/tls.crt` and `tls.key`, generating a self-signed certificate for
/// 127.0.0.1, ::1, localhost and the listen address at first start.
pub fn ensure_self_signed(
    data_dir: &Path,
    listen: SocketAddr,
) -> Result<(PathBuf, PathBuf), StartError> {
    let cert = data_dir.join("tls.crt");
    let key = data_dir.join("tls.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let generated = rcgen::generate_simple_self_signed(crate::fleet::serving_names(listen))
        .map_err(|e| StartError::Certificate(e.to_string()))?;
    write_private(&key, generated.signing_key.serialize_pem().as_bytes())
        .map_err(data_err(&key))?;
    write_private(&cert, generated.cert.pem().as_bytes()).map_err(data_err(&cert))?;
    Ok((cert, key))
}

/// Opens the store as configured; migrations run here, before anything is served.
pub async fn open_store(
    config: &ServerConfig,
    clock: SharedClock,
) -> Result<Arc<dyn Store>, StartError> {
    Ok(open_engine(config, clock).await?.0)
}

/// Opens the store; the etcd store is also answered as itself (its controllers write
/// through fenced views of it).
async fn open_engine(
    config: &ServerConfig,
    clock: SharedClock,
) -> Result<(Arc<dyn Store>, Option<Arc<EtcdStore>>), StartError> {
    let store_config = StoreConfig {
        clock,
        event_log_capacity: config.event_log_capacity,
        event_log_max_bytes: config.event_log_max_bytes,
        min_flush_interval: config.min_flush_interval,
        object_cache_bytes: config.object_cache_bytes,
        ..StoreConfig::default()
    };
    let store: Arc<dyn Store> = match config.store_backend {
        StoreBackend::Sled => {
            let path = config.data_dir.join("store");
            KvStore::<SledEngine>::open_sled(&path, store_config).map_err(StartError::Store)?
        }
        StoreBackend::Memory => KvStore::<MemoryEngine>::memory(store_config),
        StoreBackend::Log => {
            let path = config.data_dir.join("store-log");
            KvStore::<LogEngine>::open_log(&path, store_config).map_err(StartError::Store)?
        }
        StoreBackend::Etcd => {
            let mut options = config.etcd_store.clone();
            // Servers that elect a leader share the store: only the leader collects.
            if config.leader_election.enabled && options.garbage_collection == Collection::Always {
                options.garbage_collection = Collection::InTerm;
            }
            let etcd = EtcdStore::open(&config.etcd, store_config, options)
                .await
                .map_err(StartError::Store)?;
            return Ok((etcd.clone(), Some(etcd)));
        }
    };
    Ok((store, None))
}

/// The API's state over an opened store (not yet marked ready).
pub fn api_state(
    config: &ServerConfig,
    store: Arc<dyn Store>,
    registry: Arc<KindRegistry>,
    (admin_token, join_token): (&str, &str),
    clock: SharedClock,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<ApiState, StartError> {
    Ok(ApiState {
        store,
        registry,
        auth: auth::Authenticator::new(admin_token.to_string(), join_token.to_string()),
        metrics: api::wire::metrics::Metrics::new().map_err(StartError::Metrics)?,
        defaulting: config.defaulting.clone(),
        clock,
        limits: config.limits.clone(),
        ready: Arc::new(AtomicBool::new(false)),
        simulation: config
            .controllers
            .as_ref()
            .map(crate::simulation::SimulationSettings::of)
            .unwrap_or_default(),
        dry_run: api::computed::simulation::DryRun::default(),
        shutdown,
        eviction_brake: BrakeSlot::default(),
        member_timing: config.controllers.as_ref().map(|c| {
            flotilla_api::member_timing::MemberTiming::for_grace_period(c.health.grace.monitor)
        }),
    })
}

/// Starts every controller of [`controllers::CONTROLLERS`] over the API's store, registry, clock
/// and metrics registry, and hands the API their partition brake (for `evictionbrakes`).
pub fn start_controllers(
    state: &mut ApiState,
    settings: &ControllerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<ControllerHandle>, StartError> {
    let store = state.store.clone();
    start_controllers_over(store, state, settings, stop)
}

/// As [`start_controllers`], the controllers reading and writing through `store` (a view of
/// the API's store: on etcd, the one that reads from the watch cache).
fn start_controllers_over(
    store: Arc<dyn Store>,
    state: &mut ApiState,
    settings: &ControllerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<ControllerHandle>, StartError> {
    let member = member_clients(settings)?;
    let (handles, brake) = controllers_over(
        store,
        state,
        member,
        &state.metrics.registry,
        settings,
        stop,
    )?;
    state.eviction_brake.fill(brake);
    Ok(handles)
}

/// One HTTP client (and connection pool) for every call to simulated push members, and one
/// Kubernetes client per push member that is an API server.
fn member_clients(settings: &ControllerSettings) -> Result<Arc<MemberClients>, StartError> {
    Ok(Arc::new(MemberClients {
        surface: HttpMemberClient::new(settings.probe_timeout).map_err(StartError::MemberClient)?,
        kube: KubeMemberClient::new(settings.probe_timeout),
    }))
}

/// Builds a fresh controller context over `store` (its brake's startup grace and the health
/// monitor's memory start now) and starts every controller on it.
fn controllers_over(
    store: Arc<dyn Store>,
    state: &ApiState,
    member: Arc<MemberClients>,
    metrics: &prometheus::Registry,
    settings: &ControllerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(Vec<ControllerHandle>, EvictionBrake), StartError> {
    let ctx = ControllerContext::new(
        store,
        state.registry.clone(),
        state.clock.clone(),
        member,
        metrics,
        settings.clone(),
    )
    .map_err(StartError::Controllers)?;
    let handles = ctx
        .start(controllers::CONTROLLERS, &stop)
        .map_err(StartError::Controllers)?;
    Ok((handles, ctx.brake.clone()))
}

/// Runs the controllers only while this server leads the servers that share `etcd`: each
/// term starts them afresh over the store fenced by the term, with a registry of their own
/// for their metrics, and hands the API their brake while it lasts.
fn lead_controllers(
    config: &ServerConfig,
    settings: &ControllerSettings,
    state: &ApiState,
    etcd: &Arc<EtcdStore>,
) -> Result<LeaderLoop, StartError> {
    let election = &config.leader_election;
    election
        .timing
        .validate()
        .map_err(StartError::LeaderElection)?;
    let identity = election.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "flotilla-server".to_string());
        format!("{host}/{}/{}", config.listen, std::process::id())
    });
    let elector = Elector::new(
        etcd.client().clone(),
        etcd.keys().prefix(),
        &identity,
        election.timing,
    );
    let metrics = LeaderMetrics::register(&state.metrics.registry).map_err(StartError::Metrics)?;
    let member = member_clients(settings)?;
    let term_state = state.clone();
    let term_settings = ControllerSettings {
        shared_store: true,
        ..settings.clone()
    };
    let runtime = config.controller_runtime.clone();
    let start: StartTerm = Box::new(move |store, stop| {
        let _on = runtime.as_ref().map(|rt| rt.enter());
        let registry = prometheus::Registry::new();
        let (handles, brake) = controllers_over(
            store,
            &term_state,
            member.clone(),
            &registry,
            &term_settings,
            stop,
        )
        .map_err(|e| flotilla_support::error_chain(&e))?;
        term_state.metrics.set_term_registry(Some(registry));
        term_state.eviction_brake.fill(brake);
        Ok(handles)
    });
    let stopped_state = state.clone();
    let stopped: TermStopped = Box::new(move || {
        stopped_state.eviction_brake.empty();
        stopped_state.metrics.set_term_registry(None);
    });
    tracing::info!(%identity, timing = ?election.timing, "campaigning to lead the controllers");
    Ok(LeaderLoop::spawn(
        elector,
        etcd.clone(),
        start,
        stopped,
        metrics,
        state.shutdown.clone(),
    ))
}

/// With `--leader-elect=false` on etcd this server's controllers write unfenced: it refuses to
/// start while another server takes part in the fleet's election (leads, or waits to).
async fn refuse_beside_an_election(etcd: &EtcdStore) -> Result<(), StartError> {
    let holder = election_holder(etcd.client(), etcd.keys().prefix())
        .await
        .map_err(|e| StartError::LeaderElection(flotilla_support::error_chain(&e)))?;
    match holder {
        None => Ok(()),
        Some((key, identity)) => Err(StartError::LeaderElection(format!(
            "--leader-elect=false, but the server {identity:?} holds the election key {key} of \
             this fleet: its controllers and this server's would both act, unfenced; start this \
             server with --leader-elect, or stop the others"
        ))),
    }
}

/// HTTP settings of every connection: a client has `header_read_timeout` to send each
/// request head (an idle keep-alive connection is closed after it too).
fn configure_http(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    limits: &Limits,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
}

/// This server's certificate files and the fleet CA's PEM, when it serves HTTPS with the
/// fleet's CA.
type FleetTls = Option<(PathBuf, PathBuf, String)>;

/// The fleet's tokens from the shared store (its files made to match), and, when the server
/// serves HTTPS with the default certificate, its certificate issued by the fleet's CA.
async fn fleet_credentials(
    config: &ServerConfig,
    store: &dyn Store,
) -> Result<(fleet::FleetTokens, FleetTls), FleetError> {
    let tokens = fleet::shared_tokens(store, &config.data_dir).await?;
    let tls = match config.tls {
        Tls::SelfSigned => {
            let ca = fleet::shared_ca(store).await?;
            let files = fleet::write_serving_files(&config.data_dir, &ca, config.listen)?;
            Some((files.cert, files.key, ca.cert_pem().to_string()))
        }
        Tls::Plain | Tls::Files { .. } => None,
    };
    Ok((tokens, tls))
}

/// Starts the server.
pub async fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(data_err(&config.data_dir))?;
    let clock = config.clock.clone();
    let (admin_token, join_token, store, etcd, fleet_tls) = if config.store_backend
        == StoreBackend::Etcd
    {
        // The fleet's tokens and CA live in the shared store, so it opens first.
        let (store, etcd) = open_engine(&config, clock.clone()).await?;
        match fleet_credentials(&config, store.as_ref()).await {
            Ok((tokens, fleet_tls)) => (tokens.admin, tokens.join, store, etcd, fleet_tls),
            Err(e) => {
                if let Err(closing) = store.close().await {
                    tracing::warn!(error = %closing, "closing the store after a failed start failed");
                }
                return Err(StartError::Fleet(e));
            }
        }
    } else {
        let admin_token = ensure_token(&config.data_dir, "admin.token")?;
        let join_token = ensure_token(&config.data_dir, "join.token")?;
        let (store, etcd) = open_engine(&config, clock.clone()).await?;
        (admin_token, join_token, store, etcd, None)
    };

    // Every stored CRD is registered before anything is served; the feed keeps it so.
    let (registry, crd_feed) = CrdFeed::start(store.clone())
        .await
        .map_err(StartError::Store)?;

    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let mut state = api_state(
        &config,
        store.clone(),
        registry,
        (&admin_token, &join_token),
        clock,
        stopping_rx,
    )?;
    // Every stored member credential is known before anything is served; the feed keeps
    // them in step with the store (other servers' registrations and revocations included).
    let credential_feed = CredentialFeed::start(&state)
        .await
        .map_err(StartError::Store)?;
    let ready = state.ready.clone();
    let mut leader = None;
    let controllers = match (&config.controllers, &etcd) {
        (Some(settings), Some(etcd)) if config.leader_election.enabled => {
            leader = Some(lead_controllers(&config, settings, &state, etcd)?);
            Vec::new()
        }
        (Some(settings), etcd) => {
            if let Some(etcd) = etcd {
                refuse_beside_an_election(etcd).await?;
            }
            let stop = state.shutdown.clone();
            // Every task the controllers spawn, now and later, goes to their runtime.
            let _on = config.controller_runtime.as_ref().map(|rt| rt.enter());
            // On etcd they read the watch cache (`ReadMode::Cached`), the API reads fresh.
            let store: Arc<dyn Store> = match &etcd {
                Some(etcd) => etcd.for_controllers(),
                None => state.store.clone(),
            };
            start_controllers_over(store, &mut state, settings, stop)?
        }
        (None, _) => Vec::new(),
    };
    let app = api::router(state);

    let listener =
        std::net::TcpListener::bind(config.listen).map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: config.listen,
        source,
    })?;
    let (tx, rx) = oneshot::channel::<()>();
    // The certificate files, and the CA the kubeconfig trusts when it is not the certificate.
    let tls_files = match (&config.tls, fleet_tls) {
        (Tls::Plain, _) => None,
        (Tls::SelfSigned, Some((cert, key, ca))) => Some((cert, key, Some(ca))),
        (Tls::SelfSigned, None) => {
            let (cert, key) = ensure_self_signed(&config.data_dir, config.listen)?;
            Some((cert, key, None))
        }
        (Tls::Files { cert, key }, _) => Some((cert.clone(), key.clone(), None)),
    };
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        let _ = rx.await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(30)));
    });
    let listen_err = |source| StartError::Listen {
        addr: config.listen,
        source,
    };
    let limits = &config.limits;
    let (scheme, task, ca_pem) = match tls_files {
        None => {
            let mut server = axum_server::from_tcp(listener)
                .map_err(listen_err)?
                .acceptor(LimitAcceptor::new(
                    axum_server::accept::DefaultAcceptor,
                    limits.max_connections,
                ))
                .handle(handle);
            configure_http(server.http_builder(), limits);
            let task = tokio::spawn(async move { server.serve(app.into_make_service()).await });
            ("http", task, None)
        }
        Some((cert, key, ca)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&cert, &key)
                .await
                .map_err(StartError::Tls)?;
            let ca_pem = match ca {
                Some(ca) => ca,
                None => std::fs::read_to_string(&cert).map_err(StartError::Tls)?,
            };
            let tls_acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
                .handshake_timeout(limits.header_read_timeout);
            let mut server = axum_server::from_tcp(listener)
                .map_err(listen_err)?
                .acceptor(LimitAcceptor::new(tls_acceptor, limits.max_connections))
                .handle(handle);
            configure_http(server.http_builder(), limits);
            let task = tokio::spawn(async move { server.serve(app.into_make_service()).await });
            ("https", task, Some(ca_pem))
        }
    };
    let url = format!("{scheme}://{addr}");
    let kubeconfig_path = config.data_dir.join("kubeconfig");
    write_private(
        &kubeconfig_path,
        kubeconfig(&url, &admin_token, ca_pem.as_deref()).as_bytes(),
    )
    .map_err(data_err(&kubeconfig_path))?;
    ready.store(true, Ordering::SeqCst);
    tracing::info!(%addr, scheme, data_dir = %config.data_dir.display(), "flotilla-server is serving");
    Ok(ServerHandle {
        addr,
        scheme,
        admin_token,
        store,
        shutdown: Some(tx),
        stopping: stopping_tx,
        controllers,
        leader,
        crd_feed: Some(crd_feed),
        credential_feed: Some(credential_feed),
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ListOptions;
    use crate::testing::eventually;
    use chrono::TimeZone;
    use flotilla_api::kinds::well_known;
    use flotilla_support::clock::FakeClock;
    use serde_json::{json, Value};

    /// The clock of the config reaches the store and the controllers of an in-process server.
    #[tokio::test]
    async fn an_in_process_server_runs_on_the_configured_clock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = chrono::Utc
            .with_ymd_and_hms(2030, 1, 2, 3, 4, 5)
            .single()
            .expect("a valid time");
        let mut config = ServerConfig::new(dir.path());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.store_backend = StoreBackend::Memory;
        config.tls = Tls::Plain;
        config.clock = Arc::new(FakeClock::new(fake));
        let server = start(config).await.expect("server starts");
        let stamp = "2030-01-02T03:04:05Z";
        let ric = flotilla_api::kinds::builtin_by_plural(
            flotilla_api::kinds::CONFIG_GROUP,
            "resourceinterpretercustomizations",
        )
        .expect("a built-in kind");
        // A customization that does not decode: the controller records a Warning Event.
        let created = server
            .store
            .create(
                &ric,
                json!({"apiVersion": "config.karmada.io/v1alpha1",
                       "kind": "ResourceInterpreterCustomization",
                       "metadata": {"name": "broken"}, "spec": "not an object"}),
            )
            .await
            .expect("stored");
        assert_eq!(created["metadata"]["creationTimestamp"], stamp);
        let event = eventually(
            "a CustomizationInvalid Event",
            Duration::from_secs(20),
            || async {
                let events = server
                    .store
                    .list(&well_known::events(), None, &ListOptions::default())
                    .await
                    .expect("events");
                events.items.into_iter().find(|e: &Value| {
                    e["reason"] == "CustomizationInvalid" && e["involvedObject"]["name"] == "broken"
                })
            },
        )
        .await;
        assert_eq!(event["firstTimestamp"], stamp, "{event}");
        server.shutdown().await.expect("clean shutdown");
    }

    /// Whether the server's discovery serves `group/version` (polled until `want` or 20 s).
    async fn wait_discovery(server: &ServerHandle, path: &str, want: bool) {
        let client = reqwest::Client::new();
        let what = format!("{path} to be {}", if want { "served" } else { "gone" });
        eventually(&what, Duration::from_secs(20), || async {
            let status = client
                .get(format!("{}{path}", server.url()))
                .bearer_auth(&server.admin_token)
                .send()
                .await
                .expect("discovery answers")
                .status();
            (status.is_success() == want)
                .then_some(())
                .ok_or_else(|| format!("{path} answers {status}"))
        })
        .await;
    }

    /// The store alone feeds the kind registry: a CRD written past the API is served, one
    /// deleted past it is not, and a restarted server serves every stored CRD at once.
    #[tokio::test]
    async fn discovery_follows_the_stored_crds_across_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = ServerConfig::new(dir.path());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.tls = Tls::Plain;
        config.controllers = None;
        let crd = |plural: &str| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": format!("{plural}.example.io")},
                   "spec": {"group": "example.io", "scope": "Namespaced",
                            "names": {"plural": plural, "kind": "Thing"},
                            "versions": [{"name": "v1", "served": true, "storage": true}]}})
        };
        let crds = well_known::custom_resource_definitions();
        let server = start(config.clone()).await.expect("server starts");
        server
            .store
            .create(&crds, crd("things"))
            .await
            .expect("stored");
        wait_discovery(&server, "/apis/example.io/v1", true).await;
        server
            .store
            .delete(&crds, None, "things.example.io", &Default::default())
            .await
            .expect("deleted");
        wait_discovery(&server, "/apis/example.io/v1", false).await;
        server
            .store
            .create(&crds, crd("gadgets"))
            .await
            .expect("stored");
        server.shutdown().await.expect("clean shutdown");

        let server = start(config).await.expect("server restarts");
        let client = reqwest::Client::new();
        let answer = client
            .get(format!("{}/apis/example.io/v1", server.url()))
            .bearer_auth(&server.admin_token)
            .send()
            .await
            .expect("discovery answers");
        let status = answer.status();
        let body = answer.text().await.expect("a body");
        assert_eq!(status, 200, "{body}");
        let list: Value = serde_json::from_str(&body).expect("a resource list");
        let plurals: Vec<&str> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(plurals, ["gadgets"], "{list}");
        server.shutdown().await.expect("clean shutdown");
    }
}
