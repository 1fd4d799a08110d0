//! How a server reaches etcd: [`EtcdConfig`] (endpoints, TLS files, prefix, timeouts, with the
//! meanings of etcdctl's flags) and [`connect`], which checks the configuration, builds the
//! client and waits (at most the dial timeout) until a member answers, so that a wrong
//! endpoint, CA or certificate fails at start-up with the flag or endpoint at fault named,
//! not at the first write.
//!
//! Only the rustls TLS stack is built in and no system trust roots: an `https://` endpoint
//! needs `--etcd-cacert`.

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default `--etcd-prefix`: every key of the fleet lies under it.
pub const DEFAULT_PREFIX: &str = "/flotilla";
/// The default `--etcd-dial-timeout` (etcdctl's `--dial-timeout` is 2 s; a server starts once).
pub const DEFAULT_DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// The default `--etcd-request-timeout`, the deadline callers give one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keep-alive ping interval and the wait for its answer: Kubernetes' apiserver values
/// (`keepaliveTime` 30 s, `keepaliveTimeout` 10 s). Pings go out only while a stream (a watch)
/// is open: etcd answers pings on an idle connection with `GOAWAY too_many_pings`.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach etcd: endpoints and TLS, with etcdctl's meanings.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// `--etcd-endpoints`: `http://` or `https://` URLs (or `host:port`, then `https://` when
    /// TLS files are given, `http://` otherwise), all with the same scheme.
    pub endpoints: Vec<String>,
    /// `--etcd-cacert`: verify the servers' certificates with this CA (PEM).
    pub ca_file: Option<PathBuf>,
    /// `--etcd-cert`: the client certificate (PEM), for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    /// `--etcd-key`: the client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// `--etcd-prefix`: every key under it ([`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// `--etcd-dial-timeout`: how long [`connect`] waits for a connection and a first answer
    /// ([`DEFAULT_DIAL_TIMEOUT`]).
    pub dial_timeout: Duration,
    /// `--etcd-request-timeout`: the deadline callers give each request
    /// ([`DEFAULT_REQUEST_TIMEOUT`]); not applied by the client itself, so watches last.
    pub request_timeout: Duration,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: Vec::new(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            prefix: DEFAULT_PREFIX.to_string(),
            dial_timeout: DEFAULT_DIAL_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl EtcdConfig {
    /// The defaults with these endpoints.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..EtcdConfig::default()
        }
    }
}

/// Why [`connect`] could not reach etcd; each names the flag, file or endpoint at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `--etcd-endpoints` is empty.
    #[error("no etcd endpoint: --etcd-endpoints needs at least one URL")]
    NoEndpoints,
    /// An endpoint is not an `http://` or `https://` URL (or `host:port`).
    #[error("etcd endpoint {endpoint:?}: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// `http://` and `https://` endpoints mixed: one TLS setting serves them all.
    #[error("etcd endpoints mix http:// ({http}) and https:// ({https}); use one scheme")]
    MixedSchemes { http: String, https: String },
    /// TLS files given for a plain-HTTP endpoint.
    #[error("etcd endpoint {endpoint} is http://, but {flag} is given: use https://, or drop the TLS flags")]
    TlsOverHttp {
        endpoint: String,
        flag: &'static str,
    },
    /// An `https://` endpoint without a CA to verify it.
    #[error("etcd endpoint {endpoint} is https:// but no --etcd-cacert is given (no system trust roots are built in)")]
    NoCa { endpoint: String },
    /// `--etcd-cert` without `--etcd-key`, or the other way round.
    #[error("{given} {path} is given without {missing}: the client certificate needs both")]
    HalfIdentity {
        given: &'static str,
        path: PathBuf,
        missing: &'static str,
    },
    /// A TLS file cannot be read.
    #[error("{flag} {path}: cannot read it")]
    Unreadable {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A TLS file holds no PEM block.
    #[error("{flag} {path}: not a PEM file (no -----BEGIN line)")]
    NotPem { flag: &'static str, path: PathBuf },
    /// A zero dial timeout would fail every connection.
    #[error("--etcd-dial-timeout must be more than 0")]
    ZeroDialTimeout,
    /// The client could not be built from the endpoints and TLS settings.
    #[error("etcd client for {endpoints}")]
    Client {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// No member answered: refused, TLS rejected, no leader.
    #[error("etcd at {endpoints} did not answer")]
    Unreachable {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// No member answered within the dial timeout.
    #[error("etcd at {endpoints} did not answer within --etcd-dial-timeout {timeout:?}")]
    Timeout {
        endpoints: String,
        timeout: Duration,
    },
}

/// What [`validate`] settled: the endpoints with their scheme, and the TLS settings, if any.
struct Plan {
    endpoints: Vec<String>,
    tls: Option<TlsOptions>,
}

/// Connects to etcd as `config` says and waits until a member answers a status request (at
/// most `dial_timeout`). The client requires a leader (a request to a member cut off from its
/// cluster fails at once instead of waiting), pings over HTTP/2 while a stream is open, and
/// balances over every endpoint.
pub async fn connect(config: &EtcdConfig) -> Result<Client, ConnectError> {
    let plan = validate(config)?;
    let endpoints = plan.endpoints.join(",");
    let tls = plan.tls.is_some();
    let mut options = ConnectOptions::new()
        .with_connect_timeout(config.dial_timeout)
        .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
        .with_keep_alive_while_idle(false)
        .with_require_leader(true);
    if let Some(tls) = plan.tls {
        options = options.with_tls(tls);
    }
    let mut client = Client::connect(&plan.endpoints, Some(options))
        .await
        .map_err(|source| ConnectError::Client {
            endpoints: endpoints.clone(),
            source,
        })?;
    // The client connects lazily: ask once, so that a wrong address, CA or certificate fails
    // here.
    let status = match tokio::time::timeout(config.dial_timeout, client.status()).await {
        Ok(Ok(status)) => status,
        Ok(Err(source)) => return Err(ConnectError::Unreachable { endpoints, source }),
        Err(_) => {
            return Err(ConnectError::Timeout {
                endpoints,
                timeout: config.dial_timeout,
            })
        }
    };
    tracing::info!(
        endpoints = %endpoints,
        etcd_version = status.version(),
        revision = status.header().map(|h| h.revision()).unwrap_or_default(),
        tls,
        client_cert = config.cert_file.is_some(),
        prefix = %config.prefix,
        "connected to etcd"
    );
    Ok(client)
}

/// Checks `config` without touching the network: endpoints, schemes, TLS files.
fn validate(config: &EtcdConfig) -> Result<Plan, ConnectError> {
    if config.endpoints.is_empty() {
        return Err(ConnectError::NoEndpoints);
    }
    if config.dial_timeout.is_zero() {
        return Err(ConnectError::ZeroDialTimeout);
    }
    let tls_flag = [
        (config.ca_file.is_some(), "--etcd-cacert"),
        (config.cert_file.is_some(), "--etcd-cert"),
        (config.key_file.is_some(), "--etcd-key"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));

    let mut endpoints = Vec::with_capacity(config.endpoints.len());
    let (mut http, mut https) = (None, None);
    for endpoint in &config.endpoints {
        let endpoint = endpoint.trim();
        let (scheme, rest) = match endpoint.split_once("://") {
            Some((scheme, rest)) => (scheme, rest),
            None if tls_flag.is_some() => ("https", endpoint),
            None => ("http", endpoint),
        };
        if rest.is_empty() || rest.starts_with('/') {
            return Err(ConnectError::BadEndpoint {
                endpoint: endpoint.to_string(),
                reason: "no host:port".to_string(),
            });
        }
        let url = format!("{scheme}://{rest}");
        match scheme {
            "http" => {
                if let Some(flag) = tls_flag {
                    return Err(ConnectError::TlsOverHttp {
                        endpoint: url,
                        flag,
                    });
                }
                http.get_or_insert_with(|| url.clone());
            }
            "https" => {
                https.get_or_insert_with(|| url.clone());
            }
            other => {
                return Err(ConnectError::BadEndpoint {
                    endpoint: endpoint.to_string(),
                    reason: format!("scheme {other}:// is not http:// or https://"),
                })
            }
        }
        endpoints.push(url);
    }
    if let (Some(http), Some(https)) = (&http, &https) {
        return Err(ConnectError::MixedSchemes {
            http: http.clone(),
            https: https.clone(),
        });
    }

    let identity = match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => Some(Identity::from_pem(
            read_pem("--etcd-cert", cert)?,
            read_pem("--etcd-key", key)?,
        )),
        (Some(cert), None) => {
            return Err(ConnectError::HalfIdentity {
                given: "--etcd-cert",
                path: cert.clone(),
                missing: "--etcd-key",
            })
        }
        (None, Some(key)) => {
            return Err(ConnectError::HalfIdentity {
                given: "--etcd-key",
                path: key.clone(),
                missing: "--etcd-cert",
            })
        }
        (None, None) => None,
    };
    let tls = match (https, &config.ca_file) {
        (None, _) => None,
        (Some(endpoint), None) => return Err(ConnectError::NoCa { endpoint }),
        (Some(_), Some(ca)) => {
            let tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read_pem("--etcd-cacert", ca)?));
            Some(match identity {
                Some(identity) => tls.identity(identity),
                None => tls,
            })
        }
    };
    Ok(Plan { endpoints, tls })
}

/// Reads a PEM file given by `flag`.
fn read_pem(flag: &'static str, path: &Path) -> Result<Vec<u8>, ConnectError> {
    let bytes = std::fs::read(path).map_err(|source| ConnectError::Unreadable {
        flag,
        path: path.to_path_buf(),
        source,
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(ConnectError::NotPem {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::etcd::EtcdCluster;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    /// A temp dir with `ca.pem`, `cert.pem`, `key.pem` (PEM-looking) and `junk.txt`.
    fn files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.path().join(name), PEM).unwrap();
        }
        std::fs::write(dir.path().join("junk.txt"), "not a certificate").unwrap();
        dir
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let dir = files();
        let f = |name: &str| Some(dir.path().join(name));
        let config = |endpoints: &[&str],
                      ca: Option<PathBuf>,
                      cert: Option<PathBuf>,
                      key: Option<PathBuf>| EtcdConfig {
            ca_file: ca,
            cert_file: cert,
            key_file: key,
            ..EtcdConfig::new(endpoints.iter().copied())
        };
        // (case, config, the error's text must contain these; empty means valid)
        let cases: Vec<(&str, EtcdConfig, &[&str])> = vec![
            (
                "no endpoint",
                config(&[], None, None, None),
                &["--etcd-endpoints"],
            ),
            (
                "plain http",
                config(&["http://127.0.0.1:2379"], None, None, None),
                &[],
            ),
            (
                "host:port without TLS is http",
                config(&["127.0.0.1:2379"], None, None, None),
                &[],
            ),
            (
                "https with CA and client certificate",
                config(
                    &["https://10.0.0.1:2379", "10.0.0.2:2379"],
                    f("ca.pem"),
                    f("cert.pem"),
                    f("key.pem"),
                ),
                &[],
            ),
            (
                "https with CA only",
                config(&["https://10.0.0.1:2379"], f("ca.pem"), None, None),
                &[],
            ),
            (
                "bad scheme",
                config(&["ftp://10.0.0.1:2379"], None, None, None),
                &["ftp://10.0.0.1:2379", "scheme ftp://"],
            ),
            (
                "no host",
                config(&["http://"], None, None, None),
                &["\"http://\"", "no host:port"],
            ),
            (
                "mixed schemes",
                config(
                    &["http://10.0.0.1:2379", "https://10.0.0.2:2379"],
                    None,
                    None,
                    None,
                ),
                &[
                    "http://10.0.0.1:2379",
                    "https://10.0.0.2:2379",
                    "one scheme",
                ],
            ),
            (
                "TLS flags on http",
                config(&["http://10.0.0.1:2379"], f("ca.pem"), None, None),
                &["http://10.0.0.1:2379", "--etcd-cacert"],
            ),
            (
                "client certificate on http",
                config(&["http://10.0.0.1:2379"], None, f("cert.pem"), f("key.pem")),
                &["http://10.0.0.1:2379", "--etcd-cert"],
            ),
            (
                "https without CA",
                config(&["https://10.0.0.1:2379"], None, None, None),
                &["https://10.0.0.1:2379", "--etcd-cacert"],
            ),
            (
                "cert without key",
                config(&["https://10.0.0.1:2379"], f("ca.pem"), f("cert.pem"), None),
                &["--etcd-cert", "cert.pem", "without --etcd-key"],
            ),
            (
                "key without cert",
                config(&["https://10.0.0.1:2379"], f("ca.pem"), None, f("key.pem")),
                &["--etcd-key", "key.pem", "without --etcd-cert"],
            ),
            (
                "missing CA file",
                config(&["https://10.0.0.1:2379"], f("nope.pem"), None, None),
                &["--etcd-cacert", "nope.pem", "cannot read"],
            ),
            (
                "missing key file",
                config(
                    &["https://10.0.0.1:2379"],
                    f("ca.pem"),
                    f("cert.pem"),
                    f("nokey.pem"),
                ),
                &["--etcd-key", "nokey.pem", "cannot read"],
            ),
            (
                "CA not PEM",
                config(&["https://10.0.0.1:2379"], f("junk.txt"), None, None),
                &["--etcd-cacert", "junk.txt", "not a PEM"],
            ),
        ];
        for (case, config, wanted) in cases {
            match validate(&config) {
                Ok(plan) => {
                    assert!(
                        wanted.is_empty(),
                        "{case}: valid, wanted an error with {wanted:?}"
                    );
                    assert_eq!(plan.endpoints.len(), config.endpoints.len(), "{case}");
                    let https = plan.endpoints[0].starts_with("https://");
                    assert_eq!(plan.tls.is_some(), https, "{case}: {:?}", plan.endpoints);
                    assert!(
                        plan.endpoints
                            .iter()
                            .all(|e| e.starts_with("http://") || e.starts_with("https://")),
                        "{case}: {:?}",
                        plan.endpoints
                    );
                }
                Err(err) => {
                    assert!(!wanted.is_empty(), "{case}: wanted valid, got: {err}");
                    let text = err.to_string();
                    for w in wanted {
                        assert!(text.contains(w), "{case}: {text:?} does not name {w:?}");
                    }
                }
            }
        }
        let zero = EtcdConfig {
            dial_timeout: Duration::ZERO,
            ..EtcdConfig::new(["http://127.0.0.1:2379"])
        };
        assert!(matches!(
            validate(&zero),
            Err(ConnectError::ZeroDialTimeout)
        ));
    }

    #[test]
    fn defaults_are_etcdctl_and_kubernetes_like() {
        let config = EtcdConfig::default();
        assert_eq!(config.prefix, "/flotilla");
        assert_eq!(config.dial_timeout, Duration::from_secs(5));
        assert_eq!(config.request_timeout, Duration::from_secs(10));
        assert!(config.endpoints.is_empty() && config.ca_file.is_none());
    }

    /// The error of a connection that must fail: etcd unreachable, or not answering in time.
    async fn refused(config: &EtcdConfig) -> ConnectError {
        match connect(config).await {
            Ok(_) => panic!("connected to {:?}, wanted a refusal", config.endpoints),
            Err(err) => {
                assert!(
                    matches!(
                        err,
                        ConnectError::Unreachable { .. } | ConnectError::Timeout { .. }
                    ),
                    "{err}"
                );
                err
            }
        }
    }

    #[tokio::test]
    async fn connects_to_plain_etcd_and_fails_fast_on_a_closed_port() {
        let cluster = EtcdCluster::start(1).await.unwrap();
        let mut client = connect(&EtcdConfig::new(cluster.endpoints()))
            .await
            .unwrap();
        client.put("/connect/plain", "1", None).await.unwrap();

        // A port nobody listens on (bound, then released).
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = EtcdConfig {
            dial_timeout: Duration::from_secs(2),
            ..EtcdConfig::new([format!("http://{closed}")])
        };
        let err = refused(&config).await;
        assert!(err.to_string().contains(&closed.to_string()), "{err}");
    }

    #[tokio::test]
    async fn connects_over_tls_with_a_client_certificate_only() {
        let cluster = EtcdCluster::start_tls().await.unwrap();
        let with_cert = EtcdConfig {
            ca_file: cluster.ca_file().map(Path::to_path_buf),
            cert_file: cluster.client_cert_file().map(Path::to_path_buf),
            key_file: cluster.client_key_file().map(Path::to_path_buf),
            ..EtcdConfig::new(cluster.endpoints())
        };
        let mut client = connect(&with_cert).await.unwrap();
        client.put("/connect/tls", "1", None).await.unwrap();
        let got = client.get("/connect/tls", None).await.unwrap();
        assert_eq!(got.kvs()[0].value(), b"1");

        // The same CA, no client certificate: etcd's --client-cert-auth refuses the handshake.
        let without_cert = EtcdConfig {
            cert_file: None,
            key_file: None,
            dial_timeout: Duration::from_secs(3),
            ..with_cert.clone()
        };
        refused(&without_cert).await;

        // A client that does not trust etcd's CA: its own client certificate as the CA.
        let wrong_ca = EtcdConfig {
            ca_file: cluster.client_cert_file().map(Path::to_path_buf),
            dial_timeout: Duration::from_secs(3),
            ..with_cert
        };
        refused(&wrong_ca).await;
    }
}
