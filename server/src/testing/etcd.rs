//! Real etcd clusters for tests: [`EtcdCluster`] starts etcd processes on 127.0.0.1, each with
//! its own data directory under one temp dir, waits until the cluster answers, kills and
//! restarts members, and kills what is left when dropped. [`EtcdCluster::start_tls`] starts a
//! member that serves clients over TLS and demands a client certificate. Tests only (the
//! crate's `testing` feature): a plain build of the server leaves it out.
//!
//! The binary is `FLOTILLA_ETCD_BIN`, else `etcd` on `PATH`, else `/usr/bin/etcd` (Debian's
//! `etcd-server`, which `scripts/setup.sh` installs). Without it [`EtcdCluster::start`] fails,
//! naming the script: an etcd test never passes by skipping. Members keep fsync on (the store's
//! durability is under test) and etcd's own auto-compaction off (the store runs Kubernetes'
//! compactor). Waits are measured on the real clock, so a test using the fixture must not pause
//! tokio's.

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::fs::OpenOptions;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long [`EtcdCluster::start`] and [`EtcdCluster::restart`] wait for an answer.
const READY_DEADLINE: Duration = Duration::from_secs(20);
/// How long one look of the readiness wait may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two looks of the readiness wait.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// How many times a start is tried again with new ports when etcd could not bind its own.
const START_ATTEMPTS: usize = 3;
/// How many lines of a member's log an error quotes.
const LOG_TAIL_LINES: usize = 20;
/// The default binary, when `FLOTILLA_ETCD_BIN` is unset and `etcd` is not on `PATH`.
const DEBIAN_ETCD: &str = "/usr/bin/etcd";

/// Why an etcd fixture could not start or restart.
#[derive(Debug, thiserror::Error)]
pub enum EtcdFixtureError {
    /// No etcd binary where the fixture looks.
    #[error("etcd is not installed (looked for {looked}): run scripts/setup.sh, which installs Debian's etcd-server")]
    NotInstalled { looked: String },
    /// A cluster needs at least one member.
    #[error("an etcd cluster needs at least one member")]
    NoMembers,
    /// A file or process operation failed; `what` says which.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Generating the TLS certificates failed.
    #[error("generating the etcd test certificates")]
    Certificates(#[source] rcgen::Error),
    /// The etcd client could not be built.
    #[error("building an etcd client for {endpoints}")]
    Client {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A member exited while the fixture waited for it.
    #[error(
        "etcd member {member} exited ({status}) while starting; the last lines of {log}:\n{tail}"
    )]
    Exited {
        member: String,
        status: ExitStatus,
        log: String,
        tail: String,
    },
    /// The cluster did not answer within the deadline.
    #[error("etcd at {endpoints} did not answer within {waited:?} (last error: {last_error}); member logs:\n{tails}")]
    NotReady {
        endpoints: String,
        waited: Duration,
        last_error: String,
        tails: String,
    },
}

/// The PEM files of a TLS cluster, all in its temp dir.
#[derive(Clone, Debug)]
struct TlsFiles {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// One etcd process: where it keeps its data and log, its ports, and the process while it runs.
#[derive(Debug)]
struct Member {
    name: String,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Member {
    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// An etcd cluster of real processes on 127.0.0.1, removed (processes and data) when dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    bin: PathBuf,
    token: String,
    tls: Option<TlsFiles>,
    members: Vec<Member>,
    // Removed (data, logs, certificates) once `drop` has killed the processes.
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `members` etcd processes (1, 3 or 5) forming one cluster, each with its own data
    /// dir under a temp dir and client and peer URLs on free 127.0.0.1 ports, and waits until
    /// the cluster answers a quorum read (at most 20 s). When etcd could not bind a port that
    /// was free a moment before, the whole start is tried again on new ports, three times at
    /// most.
    pub async fn start(members: usize) -> Result<EtcdCluster, EtcdFixtureError> {
        Self::start_with(members, false).await
    }

    /// Starts one member that serves clients over TLS (`https://127.0.0.1:PORT`, a server
    /// certificate for 127.0.0.1 signed by a fresh CA) and demands a client certificate signed
    /// by that CA (`--client-cert-auth`). [`Self::ca_file`], [`Self::client_cert_file`] and
    /// [`Self::client_key_file`] name the PEM files a client needs.
    pub async fn start_tls() -> Result<EtcdCluster, EtcdFixtureError> {
        Self::start_with(1, true).await
    }

    async fn start_with(members: usize, tls: bool) -> Result<EtcdCluster, EtcdFixtureError> {
        if members == 0 {
            return Err(EtcdFixtureError::NoMembers);
        }
        let bin = find_etcd()?;
        let mut attempt = 1;
        loop {
            let ports = free_ports(2 * members)?;
            let mut cluster = Self::spawn(&bin, &ports, tls)?;
            match cluster.wait_ready(None).await {
                Ok(()) => {
                    tracing::debug!(
                        members,
                        tls,
                        endpoints = %cluster.endpoints().join(","),
                        "etcd test cluster ready"
                    );
                    return Ok(cluster);
                }
                Err(err) if attempt < START_ATTEMPTS && cluster.lost_a_port() => {
                    tracing::warn!(attempt, error = %err, "etcd could not bind its ports; starting again on new ones");
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Creates the temp dir (and certificates) and spawns one member per two `ports` (its
    /// client port, then its peer port).
    fn spawn(bin: &Path, ports: &[u16], tls: bool) -> Result<EtcdCluster, EtcdFixtureError> {
        let members = ports.len() / 2;
        let dir = tempfile::Builder::new()
            .prefix("flotilla-etcd-")
            .tempdir()
            .map_err(|source| io("creating the etcd fixture's temp dir", source))?;
        let tls = if tls {
            Some(write_certificates(dir.path())?)
        } else {
            None
        };
        let mut list = Vec::with_capacity(members);
        for i in 0..members {
            let name = format!("m{i}");
            let member_dir = dir.path().join(&name);
            std::fs::create_dir(&member_dir)
                .map_err(|source| io(format!("creating {}", member_dir.display()), source))?;
            list.push(Member {
                name,
                dir: member_dir,
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                child: None,
            });
        }
        static CLUSTERS: AtomicU64 = AtomicU64::new(0);
        let mut cluster = EtcdCluster {
            bin: bin.to_path_buf(),
            token: format!(
                "flotilla-test-{}-{}",
                std::process::id(),
                CLUSTERS.fetch_add(1, Ordering::Relaxed)
            ),
            tls,
            members: list,
            dir,
        };
        for i in 0..members {
            cluster.spawn_member(i)?;
        }
        Ok(cluster)
    }

    /// Starts member `i`'s process, its output appended to its log.
    fn spawn_member(&mut self, i: usize) -> Result<(), EtcdFixtureError> {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let client_url = self.member_endpoint(i);
        let member = &self.members[i];
        let log_path = member.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| io(format!("opening {}", log_path.display()), source))?;
        let log_err = log
            .try_clone()
            .map_err(|source| io(format!("opening {}", log_path.display()), source))?;
        let mut command = Command::new(&self.bin);
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-advertise-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-cluster")
            .arg(&initial_cluster)
            .args(["--initial-cluster-state", "new"])
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--auto-compaction-retention", "0"])
            .args(["--logger", "zap", "--log-level", "error"]);
        if let Some(tls) = &self.tls {
            command
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key);
        }
        // etcd also reads its flags from ETCD_* variables, and refuses a flag given twice.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|source| {
                io(
                    format!("starting {} for member {}", self.bin.display(), member.name),
                    source,
                )
            })?;
        tracing::debug!(member = %member.name, pid = child.id(), client_url = %client_url, "etcd member started");
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Every member's client URL, `http://127.0.0.1:PORT` (`https://` for a TLS cluster), in
    /// member order.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len())
            .map(|i| self.member_endpoint(i))
            .collect()
    }

    /// Member `i`'s client URL.
    ///
    /// # Panics
    /// When there is no member `i`.
    pub fn member_endpoint(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Member `i`'s process id, while it runs (`None` once killed).
    ///
    /// # Panics
    /// When there is no member `i`.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// The CA that signed the server and client certificates (`None` unless started by
    /// [`Self::start_tls`]).
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca.as_path())
    }

    /// The client certificate etcd accepts (`None` unless started by [`Self::start_tls`]).
    pub fn client_cert_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.client_cert.as_path())
    }

    /// The client certificate's private key (`None` unless started by [`Self::start_tls`]).
    pub fn client_key_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.client_key.as_path())
    }

    /// A client of every member (with the CA and client certificate of a TLS cluster). It
    /// requires a leader: while the cluster has none, requests fail at once.
    pub async fn client(&self) -> Result<Client, EtcdFixtureError> {
        self.client_of(&self.endpoints()).await
    }

    async fn client_of(&self, endpoints: &[String]) -> Result<Client, EtcdFixtureError> {
        // Without a leader, etcd fails a request at once instead of holding it for seconds.
        let mut options = ConnectOptions::new()
            .with_connect_timeout(PROBE_TIMEOUT)
            .with_require_leader(true);
        if let Some(tls) = &self.tls {
            let read = |path: &Path| {
                std::fs::read(path)
                    .map_err(|source| io(format!("reading {}", path.display()), source))
            };
            options = options.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(read(&tls.ca)?))
                    .identity(Identity::from_pem(
                        read(&tls.client_cert)?,
                        read(&tls.client_key)?,
                    )),
            );
        }
        Client::connect(endpoints, Some(options))
            .await
            .map_err(|source| EtcdFixtureError::Client {
                endpoints: endpoints.join(","),
                source,
            })
    }

    /// Kills member `i` with SIGKILL and waits for it to be gone; its data stays for
    /// [`Self::restart`]. Nothing happens when it is not running.
    ///
    /// # Panics
    /// When there is no member `i`.
    pub fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(child) = member.child.take() {
            reap(&member.name, child);
        }
    }

    /// Starts member `i` again, killed or not, on the same data dir and ports, and waits until
    /// it answers a quorum read through its own endpoint (at most 20 s).
    ///
    /// # Panics
    /// When there is no member `i`.
    pub async fn restart(&mut self, i: usize) -> Result<(), EtcdFixtureError> {
        self.kill(i);
        self.spawn_member(i)?;
        self.wait_ready(Some(i)).await
    }

    /// Which member etcd's raft elected leader, asking each running member's status; `None`
    /// when none answers or they know of no leader.
    pub async fn leader_index(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                continue;
            }
            let Ok(mut client) = self.client_of(&[self.member_endpoint(i)]).await else {
                continue;
            };
            if let Ok(Ok(status)) = tokio::time::timeout(PROBE_TIMEOUT, client.status()).await {
                if let Some(header) = status.header() {
                    ids.push((i, header.member_id()));
                }
                if status.leader() != 0 {
                    leaders.push(status.leader());
                }
            }
        }
        ids.into_iter()
            .find(|(_, id)| leaders.contains(id))
            .map(|(i, _)| i)
    }

    /// Waits until the cluster (or member `only`, through its own endpoint) answers a quorum
    /// read, failing early when a member it waits for exits.
    async fn wait_ready(&mut self, only: Option<usize>) -> Result<(), EtcdFixtureError> {
        let watched: Vec<usize> = match only {
            Some(i) => vec![i],
            None => (0..self.members.len()).collect(),
        };
        let endpoints: Vec<String> = watched.iter().map(|&i| self.member_endpoint(i)).collect();
        let mut client = self.client_of(&endpoints).await?;
        let started = Instant::now();
        loop {
            for &i in &watched {
                self.check_running(i)?;
            }
            // A linearizable read needs a leader and a quorum, and writes nothing: the store
            // under test finds an empty keyspace at revision 1.
            let probe = client.get("/", Some(GetOptions::new().with_count_only()));
            let last_error = match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(err)) => err.to_string(),
                Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
            };
            if started.elapsed() >= READY_DEADLINE {
                return Err(EtcdFixtureError::NotReady {
                    endpoints: endpoints.join(","),
                    waited: started.elapsed(),
                    last_error,
                    tails: self.log_tails(&watched),
                });
            }
            tokio::time::sleep(PROBE_PAUSE).await;
        }
    }

    /// Fails with the member's log when its process has exited.
    fn check_running(&mut self, i: usize) -> Result<(), EtcdFixtureError> {
        let member = &mut self.members[i];
        let Some(child) = member.child.as_mut() else {
            return Ok(());
        };
        let status = child
            .try_wait()
            .map_err(|source| io(format!("waiting for etcd member {}", member.name), source))?;
        match status {
            None => Ok(()),
            Some(status) => {
                member.child = None;
                let log = member.log_path();
                Err(EtcdFixtureError::Exited {
                    member: member.name.clone(),
                    status,
                    tail: log_tail(&log),
                    log: log.display().to_string(),
                })
            }
        }
    }

    /// Whether a member's log says it could not bind a port (taken since it was picked).
    fn lost_a_port(&self) -> bool {
        self.members.iter().any(|m| {
            std::fs::read_to_string(m.log_path())
                .is_ok_and(|log| log.contains("address already in use"))
        })
    }

    fn log_tails(&self, members: &[usize]) -> String {
        members
            .iter()
            .map(|&i| {
                let log = self.members[i].log_path();
                format!("--- {} ---\n{}", log.display(), log_tail(&log))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The temp dir holding every member's data and log (and a TLS cluster's PEM files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = member.child.take() {
                reap(&member.name, child);
            }
        }
    }
}

/// SIGKILL and wait, so the process is gone (not a zombie) when this returns.
fn reap(name: &str, mut child: Child) {
    if let Err(error) = child.kill() {
        tracing::warn!(member = name, pid = child.id(), %error, "killing etcd member");
    }
    if let Err(error) = child.wait() {
        tracing::warn!(member = name, pid = child.id(), %error, "waiting for etcd member");
    }
}

/// The etcd binary: `FLOTILLA_ETCD_BIN`, else `etcd` on `PATH`, else Debian's.
fn find_etcd() -> Result<PathBuf, EtcdFixtureError> {
    locate_etcd(
        std::env::var_os("FLOTILLA_ETCD_BIN").map(PathBuf::from),
        std::env::var_os("PATH"),
        Path::new(DEBIAN_ETCD),
    )
}

/// [`find_etcd`] with its environment given: the explicit binary (which must exist), else
/// `etcd` in one of the `PATH` directories, else `fallback`.
fn locate_etcd(
    explicit: Option<PathBuf>,
    path_var: Option<std::ffi::OsString>,
    fallback: &Path,
) -> Result<PathBuf, EtcdFixtureError> {
    if let Some(bin) = explicit {
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(EtcdFixtureError::NotInstalled {
                looked: format!("FLOTILLA_ETCD_BIN={}", bin.display()),
            })
        };
    }
    let on_path = path_var.and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(bin) = on_path {
        return Ok(bin);
    }
    if fallback.is_file() {
        return Ok(fallback.to_path_buf());
    }
    Err(EtcdFixtureError::NotInstalled {
        looked: format!("FLOTILLA_ETCD_BIN, etcd on PATH, {}", fallback.display()),
    })
}

/// `count` distinct ports that were free on 127.0.0.1 a moment ago (all bound at once, so no
/// two are the same, then released for etcd).
fn free_ports(count: usize) -> Result<Vec<u16>, EtcdFixtureError> {
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|source| io("binding a free port on 127.0.0.1", source))?;
        listeners.push(listener);
    }
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|source| io("reading a bound port", source))
        })
        .collect()
}

/// Writes a CA, a server certificate for 127.0.0.1 and a client certificate, all PEM, into
/// `dir`.
fn write_certificates(dir: &Path) -> Result<TlsFiles, EtcdFixtureError> {
    let certs = EtcdFixtureError::Certificates;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(certs)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "flotilla etcd test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(certs)?)
        .map_err(certs)?;

    let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok::<_, rcgen::Error>((cert.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".to_string(), "localhost".to_string()],
        "etcd",
        ExtendedKeyUsagePurpose::ServerAuth,
    )
    .map_err(certs)?;
    let (client_cert, client_key) =
        leaf(Vec::new(), "flotilla", ExtendedKeyUsagePurpose::ClientAuth).map_err(certs)?;

    let files = TlsFiles {
        ca: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    };
    for (path, pem) in [
        (&files.ca, ca.pem()),
        (&files.server_cert, server_cert),
        (&files.server_key, server_key),
        (&files.client_cert, client_cert),
        (&files.client_key, client_key),
    ] {
        std::fs::write(path, pem)
            .map_err(|source| io(format!("writing {}", path.display()), source))?;
    }
    Ok(files)
}

/// The last lines of a log file, or why it could not be read.
fn log_tail(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

fn io(what: impl Into<String>, source: std::io::Error) -> EtcdFixtureError {
    EtcdFixtureError::Io {
        what: what.into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::eventually;

    /// Whether a process with that id exists (Linux: its /proc entry).
    fn process_exists(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn one_member_starts_answers_and_is_gone_after_drop() {
        let cluster = EtcdCluster::start(1).await.unwrap();
        assert_eq!(cluster.endpoints().len(), 1);
        assert!(cluster.endpoints()[0].starts_with("http://127.0.0.1:"));
        let mut client = cluster.client().await.unwrap();
        client.put("/fixture/a", "1", None).await.unwrap();
        let got = client.get("/fixture/a", None).await.unwrap();
        assert_eq!(got.kvs()[0].value(), b"1");
        assert_eq!(cluster.leader_index().await, Some(0));

        let pid = cluster.pid(0).unwrap();
        let dir = cluster.dir().to_path_buf();
        assert!(process_exists(pid));
        drop(cluster);
        assert!(
            !process_exists(pid),
            "etcd (pid {pid}) still runs after drop"
        );
        assert!(!dir.exists(), "{} still exists after drop", dir.display());
    }

    #[tokio::test]
    async fn three_members_survive_killing_the_leader_and_restarting_it() {
        let mut cluster = EtcdCluster::start(3).await.unwrap();
        let leader = eventually("an etcd leader", Duration::from_secs(10), || {
            cluster.leader_index()
        })
        .await;
        let pid = cluster.pid(leader).unwrap();
        cluster.kill(leader);
        assert_eq!(cluster.pid(leader), None);
        assert!(!process_exists(pid));

        // The two others elect a new leader and take writes.
        let client = cluster.client().await.unwrap();
        eventually(
            "a put with one member down",
            Duration::from_secs(15),
            || {
                let mut client = client.clone();
                async move {
                    match tokio::time::timeout(PROBE_TIMEOUT, client.put("/fixture/b", "2", None))
                        .await
                    {
                        Ok(put) => put.map_err(|e| e.to_string()),
                        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
                    }
                }
            },
        )
        .await;
        let new_leader = eventually("a new etcd leader", Duration::from_secs(10), || {
            cluster.leader_index()
        })
        .await;
        assert_ne!(new_leader, leader);

        cluster.restart(leader).await.unwrap();
        assert!(cluster.pid(leader).is_some());
        // The restarted member caught up: a quorum read through it sees the write.
        let mut member = Client::connect([cluster.member_endpoint(leader)], None)
            .await
            .unwrap();
        let got = member.get("/fixture/b", None).await.unwrap();
        assert_eq!(got.kvs()[0].value(), b"2");
    }

    #[tokio::test]
    async fn tls_member_demands_a_client_certificate() {
        let cluster = EtcdCluster::start_tls().await.unwrap();
        assert!(cluster.endpoints()[0].starts_with("https://127.0.0.1:"));
        for file in [
            cluster.ca_file(),
            cluster.client_cert_file(),
            cluster.client_key_file(),
        ] {
            let text = std::fs::read_to_string(file.unwrap()).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{text}");
        }
        let mut client = cluster.client().await.unwrap();
        client.put("/fixture/tls", "yes", None).await.unwrap();
    }

    #[test]
    fn etcd_is_found_by_variable_then_path_then_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("etcd");
        std::fs::write(&bin, "").unwrap();
        let absent = dir.path().join("absent");
        let path_var = Some(dir.path().as_os_str().to_owned());

        assert_eq!(locate_etcd(Some(bin.clone()), None, &absent).unwrap(), bin);
        assert_eq!(locate_etcd(None, path_var.clone(), &absent).unwrap(), bin);
        assert_eq!(locate_etcd(None, None, &bin).unwrap(), bin);

        // A variable naming nothing is an error, even when etcd is on PATH.
        let err = locate_etcd(Some(absent.clone()), path_var, &bin).unwrap_err();
        assert!(err.to_string().contains("FLOTILLA_ETCD_BIN="), "{err}");
        let err = locate_etcd(None, Some(absent.as_os_str().to_owned()), &absent).unwrap_err();
        assert!(matches!(err, EtcdFixtureError::NotInstalled { .. }));
        assert!(err.to_string().contains("run scripts/setup.sh"), "{err}");
    }

    #[tokio::test]
    async fn a_taken_port_is_seen_as_one() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut ports = free_ports(1).unwrap();
        ports.insert(0, taken.local_addr().unwrap().port());
        let mut cluster = EtcdCluster::spawn(&find_etcd().unwrap(), &ports, false).unwrap();
        let err = cluster.wait_ready(None).await.unwrap_err();
        assert!(
            matches!(err, EtcdFixtureError::Exited { .. }),
            "wanted the member to exit: {err}"
        );
        assert!(err.to_string().contains("address already in use"), "{err}");
        assert!(cluster.lost_a_port());
    }

    #[tokio::test]
    async fn no_members_is_an_error() {
        assert!(matches!(
            EtcdCluster::start(0).await,
            Err(EtcdFixtureError::NoMembers)
        ));
    }
}
