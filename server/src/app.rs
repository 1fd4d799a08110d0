//! Starting and stopping the control plane: data directory, admin token and kubeconfig, the
//! store (migrated before anything is served), the API on a TCP listener (HTTP or HTTPS, with
//! the connection limits of [`crate::transport`]), and graceful shutdown (in-flight requests
//! finish, the store is flushed). Tests start it on port 0 through [`start`] and stop it
//! through the returned [`ServerHandle`].

use crate::api::{self, auth, ApiState, Limits};
use crate::clock::{SharedClock, SystemClock};
use crate::controllers::cluster_status::{ClusterStatusController, HealthConfig};
use crate::controllers::cluster_taints::{ClusterTaintController, TaintConfig};
use crate::controllers::{self, ControllerConfig, ControllerHandle, ControllerMetrics, Source};
use crate::events::EventRecorder;
use crate::probes::HttpMemberClient;
use crate::store::{
    KvStore, ListOptions, MemoryEngine, SledEngine, Store, StoreConfig, StoreError,
};
use crate::transport::LimitAcceptor;
use flotilla_api::defaulting::DefaultingConfig;
use flotilla_api::kinds::well_known;
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

/// Which storage engine to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Engine {
    /// sled under `<data-dir>/store` (durable; the default).
    Sled,
    /// In memory (lost at exit; for tests and demos).
    Memory,
}

/// How the API is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
    /// Plain HTTP. kubectl does not send bearer tokens over plain HTTP, so only curl and
    /// other clients can authenticate.
    Plain,
    /// HTTPS with a self-signed certificate generated at first start
    /// (`<data-dir>/tls.crt`, `<data-dir>/tls.key`); the kubeconfig trusts it. The default.
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
    /// Storage engine.
    pub engine: Engine,
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
    /// Controller settings; `None` runs the API alone.
    pub controllers: Option<ControllerSettings>,
}

/// Settings of the controllers (flags of the server).
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// Cluster health timings.
    pub health: HealthConfig,
    /// Taint decisions.
    pub taints: TaintConfig,
    /// Timeout of one probe of a push member.
    pub probe_timeout: std::time::Duration,
    /// How often every controller relists everything.
    pub resync: std::time::Duration,
    /// How often the scheduler looks at every binding again (cluster changes reach bindings
    /// this way).
    pub scheduler_resync: std::time::Duration,
    /// How often the status of Works on push members is read back.
    pub push_status_period: std::time::Duration,
    /// Concurrent reconciles of each propagation controller (detector, dependencies
    /// distributor, scheduler, binding, binding status). Never two for one key; most of a
    /// reconcile is waiting for its writes to be durable, and concurrent writers share fsyncs.
    pub propagation_workers: usize,
    /// The binding status controller aggregates a binding this long after the first change
    /// it saw, so a binding's Works created and reporting one after another cost one status
    /// write instead of one each.
    pub status_coalesce: std::time::Duration,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            health: HealthConfig::default(),
            taints: TaintConfig {
                eviction_timeout: chrono::Duration::minutes(5),
                automatic_no_execute: true,
            },
            probe_timeout: std::time::Duration::from_secs(5),
            resync: std::time::Duration::from_secs(300),
            scheduler_resync: std::time::Duration::from_secs(15),
            push_status_period: std::time::Duration::from_secs(5),
            propagation_workers: 16,
            status_coalesce: std::time::Duration::from_millis(100),
        }
    }
}

impl ServerConfig {
    /// Defaults: 127.0.0.1:7070, sled, HTTPS with a self-signed certificate.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            data_dir: data_dir.into(),
            engine: Engine::Sled,
            tls: Tls::SelfSigned,
            defaulting: DefaultingConfig::default(),
            limits: Limits::default(),
            event_log_capacity: 10_000,
            event_log_max_bytes: crate::store::DEFAULT_EVENT_LOG_MAX_BYTES,
            min_flush_interval: DEFAULT_MIN_FLUSH_INTERVAL,
            controllers: Some(ControllerSettings::default()),
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
    /// Metrics could not be registered.
    #[error("cannot register metrics")]
    Metrics(#[source] prometheus::Error),
    /// The HTTP client for members could not be built.
    #[error("cannot build the member client")]
    MemberClient(#[source] reqwest::Error),
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
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let served = (&mut self.task)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
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
    write_private(&path, &token).map_err(data_err(&path))?;
    Ok(token)
}

/// Writes a file readable by its owner only.
pub fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
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
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    let generated = rcgen::generate_simple_self_signed(names)
        .map_err(|e| StartError::Certificate(e.to_string()))?;
    write_private(&key, &generated.signing_key.serialize_pem()).map_err(data_err(&key))?;
    write_private(&cert, &generated.cert.pem()).map_err(data_err(&cert))?;
    Ok((cert, key))
}

/// Opens the store as configured; migrations run here, before anything is served.
pub async fn open_store(
    config: &ServerConfig,
    clock: SharedClock,
) -> Result<Arc<dyn Store>, StartError> {
    let store_config = StoreConfig {
        clock,
        event_log_capacity: config.event_log_capacity,
        event_log_max_bytes: config.event_log_max_bytes,
        min_flush_interval: config.min_flush_interval,
        ..StoreConfig::default()
    };
    let store: Arc<dyn Store> = match config.engine {
        Engine::Sled => {
            let path = config.data_dir.join("store");
            KvStore::<SledEngine>::open_sled(&path, store_config).map_err(StartError::Store)?
        }
        Engine::Memory => KvStore::<MemoryEngine>::memory(store_config),
    };
    Ok(store)
}

/// The API's state over an opened store (not yet marked ready).
pub fn api_state(
    config: &ServerConfig,
    store: Arc<dyn Store>,
    registry: Arc<api::registry::Registry>,
    (admin_token, join_token): (&str, &str),
    clock: SharedClock,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<ApiState, StartError> {
    Ok(ApiState {
        store,
        registry,
        auth: auth::Authenticator::new(admin_token.to_string(), join_token.to_string()),
        metrics: api::metrics::Metrics::new().map_err(StartError::Metrics)?,
        defaulting: config.defaulting.clone(),
        clock,
        limits: config.limits.clone(),
        ready: Arc::new(AtomicBool::new(false)),
        shutdown,
    })
}

/// Starts every controller over the API's store, clock and metrics registry.
pub fn start_controllers(
    state: &ApiState,
    settings: &ControllerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<ControllerHandle>, StartError> {
    let registry = &state.metrics.registry;
    let metrics = ControllerMetrics::register(registry).map_err(StartError::Metrics)?;
    let events = EventRecorder::new(
        state.store.clone(),
        state.clock.clone(),
        "flotilla-server",
        registry,
    )
    .map_err(StartError::Metrics)?;
    // One HTTP client (and connection pool) for every call to push members.
    let member_client =
        Arc::new(HttpMemberClient::new(settings.probe_timeout).map_err(StartError::MemberClient)?);
    let status = ClusterStatusController::new(
        state.store.clone(),
        state.clock.clone(),
        member_client.clone(),
        settings.health,
        events.for_component("cluster-status-controller"),
        registry,
    )
    .map_err(StartError::Metrics)?;
    let taints = ClusterTaintController::new(
        state.store.clone(),
        state.clock.clone(),
        settings.taints,
        events.for_component("cluster-controller"),
        registry,
    )
    .map_err(StartError::Metrics)?;
    let clusters = || Source::primary(flotilla_api::kinds::well_known::clusters());
    // A lease renewal concerns the cluster of the same name.
    let leases = Source::mapped(flotilla_api::kinds::well_known::leases(), |lease| {
        let in_cluster_ns = lease
            .pointer("/metadata/namespace")
            .and_then(serde_json::Value::as_str)
            == Some(flotilla_api::cluster::CLUSTER_LEASE_NAMESPACE);
        lease
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .filter(|_| in_cluster_ns)
            .map(|n| vec![n.to_string()])
            .unwrap_or_default()
    });
    let mut status_cfg = ControllerConfig::new(vec![clusters()]);
    status_cfg.workers = 4;
    status_cfg.resync = settings.resync;
    let mut taint_cfg = ControllerConfig::new(vec![clusters(), leases]);
    taint_cfg.workers = 2;
    taint_cfg.resync = settings.resync;
    let mut handles = vec![
        controllers::spawn(
            state.store.clone(),
            Arc::new(status),
            status_cfg,
            Some(metrics.clone()),
            stop.clone(),
        ),
        controllers::spawn(
            state.store.clone(),
            Arc::new(taints),
            taint_cfg,
            Some(metrics.clone()),
            stop.clone(),
        ),
    ];
    handles.extend(start_propagation(
        state,
        settings,
        member_client,
        &metrics,
        &events,
        &stop,
    )?);
    Ok(handles)
}

/// The propagation controllers: interpreter customizations, detector, dependencies
/// distributor, scheduler, binding works, binding status, and push execution.
fn start_propagation(
    state: &ApiState,
    settings: &ControllerSettings,
    member: Arc<HttpMemberClient>,
    metrics: &ControllerMetrics,
    events: &EventRecorder,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<ControllerHandle>, StartError> {
    use crate::controllers::binding_status::BindingStatusController;
    use crate::controllers::binding_works::BindingController;
    use crate::controllers::customizations::CustomizationController;
    use crate::controllers::dependencies_distributor::DependenciesDistributor;
    use crate::controllers::detector::Detector;
    use crate::controllers::push_execution::PushExecutionController;
    use crate::controllers::queue::WorkQueue;
    use crate::controllers::scheduling::SchedulerController;
    use flotilla_api::kinds::well_known;

    let store = &state.store;
    let registry = &state.metrics.registry;
    let interpreter = Arc::new(crate::interpreter::Interpreter::new());
    let spawn = |reconciler: Arc<dyn controllers::Reconciler>, config: ControllerConfig| {
        controllers::spawn(
            store.clone(),
            reconciler,
            config,
            Some(metrics.clone()),
            stop.clone(),
        )
    };
    let with = |sources: Vec<Source>, workers: usize, resync: std::time::Duration| {
        let mut c = ControllerConfig::new(sources);
        c.workers = workers;
        c.resync = resync;
        c
    };
    // The binding controllers react to a binding's spec (its generation), not to the status
    // they write themselves.
    let binding_sources = || {
        vec![
            Source::mapped(well_known::resource_bindings(), |b| {
                crate::controllers::binding_keys::binding_key(b)
                    .into_iter()
                    .collect()
            })
            .on_change_of(controllers::runtime::generation_fingerprint),
            Source::mapped(well_known::cluster_resource_bindings(), |b| {
                crate::controllers::binding_keys::binding_key(b)
                    .into_iter()
                    .collect()
            })
            .on_change_of(controllers::runtime::generation_fingerprint),
        ]
    };
    let workers = settings.propagation_workers.max(1);
    let mut handles = Vec::new();
    if let Some(ric) = flotilla_api::kinds::builtin_by_plural(
        flotilla_api::kinds::CONFIG_GROUP,
        "resourceinterpretercustomizations",
    ) {
        handles.push(spawn(
            Arc::new(CustomizationController::new(
                store.clone(),
                interpreter.clone(),
                events.for_component("interpreter"),
            )),
            with(vec![Source::primary(ric)], 1, settings.resync),
        ));
    }
    let detector_queue = WorkQueue::default();
    let detector = Detector::new(
        store.clone(),
        state.clock.clone(),
        state.registry.clone(),
        interpreter.clone(),
        events.for_component("resource-detector"),
        detector_queue.clone(),
    );
    handles.push(controllers::runtime::spawn_with_queue(
        store.clone(),
        Arc::new(detector),
        with(Detector::sources(), workers, settings.resync),
        Some(metrics.clone()),
        stop.clone(),
        detector_queue,
    ));
    let distributor_queue = WorkQueue::default();
    let distributor = DependenciesDistributor::new(
        store.clone(),
        state.clock.clone(),
        state.registry.clone(),
        interpreter.clone(),
        events.for_component("dependencies-distributor"),
        distributor_queue.clone(),
        registry,
    )
    .map_err(StartError::Metrics)?;
    handles.push(controllers::runtime::spawn_with_queue(
        store.clone(),
        Arc::new(distributor),
        with(DependenciesDistributor::sources(), workers, settings.resync),
        Some(metrics.clone()),
        stop.clone(),
        distributor_queue,
    ));
    let scheduler = SchedulerController::new(
        store.clone(),
        state.clock.clone(),
        events.for_component("default-scheduler"),
        registry,
    )
    .map_err(StartError::Metrics)?;
    handles.push(spawn(
        Arc::new(scheduler),
        with(binding_sources(), workers, settings.scheduler_resync),
    ));
    // The binding controller writes Works' spec: their status is none of its business.
    let mut work_sources = binding_sources();
    work_sources.push(
        Source::mapped(well_known::works(), BindingController::work_key)
            .on_change_of(controllers::runtime::generation_fingerprint),
    );
    handles.push(spawn(
        Arc::new(BindingController::new(
            store.clone(),
            state.registry.clone(),
            interpreter.clone(),
        )),
        with(work_sources, workers, settings.resync),
    ));
    // Status aggregation follows every Work status change, a burst of them at a time.
    // A Cluster's Ready change wakes the bindings placed there (through the controller's queue).
    let mut status_sources = binding_sources();
    status_sources.push(Source::mapped(
        well_known::works(),
        BindingController::work_key,
    ));
    status_sources.push(BindingStatusController::cluster_source());
    let status_sources = status_sources
        .into_iter()
        .map(|s| s.coalesced(settings.status_coalesce))
        .collect();
    let binding_status = BindingStatusController::new(
        store.clone(),
        state.clock.clone(),
        state.registry.clone(),
        interpreter.clone(),
    );
    let status_queue = binding_status.queue();
    handles.push(controllers::runtime::spawn_with_queue(
        store.clone(),
        Arc::new(binding_status),
        with(status_sources, workers, settings.resync),
        Some(metrics.clone()),
        stop.clone(),
        status_queue,
    ));
    handles.push(spawn(
        Arc::new(PushExecutionController::new(
            store.clone(),
            state.clock.clone(),
            member,
            settings.push_status_period,
        )),
        with(
            vec![Source::primary(well_known::works())],
            4,
            settings.resync,
        ),
    ));
    Ok(handles)
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

/// Starts the server.
pub async fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(data_err(&config.data_dir))?;
    let admin_token = ensure_token(&config.data_dir, "admin.token")?;
    let join_token = ensure_token(&config.data_dir, "join.token")?;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = open_store(&config, clock.clone()).await?;

    let registry = Arc::new(api::registry::Registry::new());
    let crds = store
        .list(
            &well_known::custom_resource_definitions(),
            None,
            &ListOptions::default(),
        )
        .await
        .map_err(StartError::Store)?;
    for crd in &crds.items {
        if let Err(e) = registry.register_crd(crd) {
            tracing::warn!(error = %e, "a stored CRD does not register");
        }
    }

    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let state = api_state(
        &config,
        store.clone(),
        registry,
        (&admin_token, &join_token),
        clock,
        stopping_rx,
    )?;
    api::registration::load_credentials(&state)
        .await
        .map_err(StartError::Store)?;
    let ready = state.ready.clone();
    let controllers = match &config.controllers {
        Some(settings) => start_controllers(&state, settings, state.shutdown.clone())?,
        None => Vec::new(),
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
    let tls_files = match &config.tls {
        Tls::Plain => None,
        Tls::SelfSigned => Some(ensure_self_signed(&config.data_dir, config.listen)?),
        Tls::Files { cert, key } => Some((cert.clone(), key.clone())),
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
        Some((cert, key)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&cert, &key)
                .await
                .map_err(StartError::Tls)?;
            let ca_pem = std::fs::read_to_string(&cert).map_err(StartError::Tls)?;
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
        &kubeconfig(&url, &admin_token, ca_pem.as_deref()),
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
        task,
    })
}
