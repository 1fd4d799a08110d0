//! The credentials a fleet of servers shares through its store (`--store etcd`): the admin
//! and join tokens, and a CA that signs every server's serving certificate, so that any server
//! accepts what another issued and one kubeconfig works against all of them. The member
//! credentials are shared too, through their own Secrets and the credential feed
//! (`api::credential_feed`).
//!
//! Both live as Secrets in `karmada-system`, a namespace whose objects are never propagated:
//!
//! - [`TOKENS_SECRET`] holds the tokens themselves (`admin-token`, `join-token`), not hashes,
//!   because every server writes the admin token into its kubeconfig. Whoever can read the
//!   store can read them, as they can read everything else in it: the Secret is at the trust
//!   level of the etcd data.
//! - [`CA_SECRET`] holds the CA's certificate and key (`ca.crt`, `ca.key`).
//!
//! The first server creates each one, with a create that fails when the Secret exists: a
//! server that loses that race reads the winner's. Tokens found in a server's data dir
//! (`admin.token`, `join.token`) go into the store when it has none yet, so an operator can
//! choose them; once the store has them, they win, and the server rewrites its files to match.
//! A server with a single-machine engine (sled, log, memory) uses none of this: its tokens are
//! its files and its certificate is self-signed (`app::ensure_token`, `app::ensure_self_signed`).

use crate::api::access::auth::generate_token;
use crate::store::{Store, StoreError};
use base64::Engine as _;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{builtin_by_plural, well_known, ResourceType};
use flotilla_support::files::write_private;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where the fleet's own Secrets live: a namespace whose objects are never propagated.
pub const FLEET_NAMESPACE: &str = "karmada-system";
/// The Secret holding the fleet's admin and join tokens.
pub const TOKENS_SECRET: &str = "flotilla-fleet-tokens";
/// The Secret holding the fleet CA's certificate and key.
pub const CA_SECRET: &str = "flotilla-fleet-ca";
/// The admin token's key in [`TOKENS_SECRET`].
pub const ADMIN_TOKEN_KEY: &str = "admin-token";
/// The join token's key in [`TOKENS_SECRET`].
pub const JOIN_TOKEN_KEY: &str = "join-token";
/// The CA certificate's key in [`CA_SECRET`] (PEM).
pub const CA_CERT_KEY: &str = "ca.crt";
/// The CA key's key in [`CA_SECRET`] (PEM).
pub const CA_KEY_KEY: &str = "ca.key";
/// The file, in each server's data dir, holding the fleet CA's certificate: what a client of
/// any server of the fleet trusts.
pub const CA_FILE: &str = "ca.crt";

/// How often a create that lost its race is followed by a read that finds nothing (the
/// Secret deleted in between) before the server gives up.
const ATTEMPTS: usize = 3;

/// Why the fleet's shared credentials could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The store did not answer.
    #[error("reading or writing Secret {FLEET_NAMESPACE}/{secret}")]
    Store {
        secret: &'static str,
        #[source]
        source: StoreError,
    },
    /// The Secret exists but does not hold what it should.
    #[error("Secret {FLEET_NAMESPACE}/{secret} is unusable: {what}; fix it, or delete it so that the next server to start creates it anew")]
    Malformed { secret: &'static str, what: String },
    /// Another server kept deleting the Secret this one lost the race to create.
    #[error("Secret {FLEET_NAMESPACE}/{secret} was created by another server but is gone again")]
    Vanished { secret: &'static str },
    /// A file in the data dir could not be read or written.
    #[error("cannot read or write {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A certificate or key could not be generated or used.
    #[error("{what}")]
    Certificate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
}

fn secrets() -> ResourceType {
    builtin_by_plural("", "secrets").unwrap_or_else(well_known::events)
}

/// A Secret of the fleet holding `data` (values in plain text, stored base64 as Kubernetes
/// stores a Secret's data).
fn fleet_secret(name: &str, kind: &str, data: &[(&str, &str)]) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(engine.encode(v))))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": FLEET_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "flotilla-server"},
        },
        "type": kind,
        "data": data,
    })
}

/// One value of a fleet Secret's data, decoded.
fn data_value(secret: &Value, name: &'static str, key: &str) -> Result<String, FleetError> {
    let malformed = |what: String| FleetError::Malformed { secret: name, what };
    let encoded = secret
        .lookup(&format!(
            "/data/{}",
            key.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(format!("it has no {key}")))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| malformed(format!("its {key} is not base64")))?;
    let text = String::from_utf8(bytes).map_err(|_| malformed(format!("its {key} is not text")))?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(malformed(format!("its {key} is empty")));
    }
    Ok(text)
}

/// Reads a fleet Secret; `None` when it does not exist yet.
async fn read_secret(store: &dyn Store, name: &'static str) -> Result<Option<Value>, FleetError> {
    match store.get(&secrets(), Some(FLEET_NAMESPACE), name).await {
        Ok(secret) => Ok(Some(secret)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(source) => Err(FleetError::Store {
            secret: name,
            source,
        }),
    }
}

/// Reads the fleet Secret `name`, or creates it from `ours()` when it does not exist. A
/// create that finds the Secret created meanwhile by another server reads theirs. Answers the
/// Secret and whether this call created it.
async fn get_or_create(
    store: &dyn Store,
    name: &'static str,
    mut ours: impl FnMut() -> Result<Value, FleetError>,
) -> Result<(Value, bool), FleetError> {
    for _ in 0..ATTEMPTS {
        if let Some(secret) = read_secret(store, name).await? {
            return Ok((secret, false));
        }
        match store.create(&secrets(), ours()?).await {
            Ok(created) => return Ok((created, true)),
            Err(StoreError::AlreadyExists { .. }) => {
                tracing::debug!(
                    secret = name,
                    "another server stored the fleet Secret first; reading theirs"
                );
            }
            Err(source) => {
                return Err(FleetError::Store {
                    secret: name,
                    source,
                })
            }
        }
    }
    Err(FleetError::Vanished { secret: name })
}

/// The fleet's admin and join tokens. Its `Debug` shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetTokens {
    /// The admin token.
    pub admin: String,
    /// The join token.
    pub join: String,
}

impl std::fmt::Debug for FleetTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetTokens { .. }")
    }
}

/// The token in `<data-dir>/<file>`, if the file exists and is not empty.
fn token_file(data_dir: &Path, file: &str) -> Result<Option<String>, FleetError> {
    let path = data_dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FleetError::File { path, source }),
    }
}

/// Makes `<data-dir>/<file>` hold `token`, warning when it held another one.
fn rewrite_token_file(data_dir: &Path, file: &str, token: &str) -> Result<(), FleetError> {
    let current = token_file(data_dir, file)?;
    if current.as_deref() == Some(token) {
        return Ok(());
    }
    if current.is_some() {
        tracing::warn!(
            %file,
            secret = %format!("{FLEET_NAMESPACE}/{TOKENS_SECRET}"),
            "the data dir's token differs from the fleet's; the fleet's replaces it"
        );
    }
    let path = data_dir.join(file);
    write_private(&path, token.as_bytes()).map_err(|source| FleetError::File { path, source })
}

/// The fleet's admin and join tokens, from [`TOKENS_SECRET`]. When the store has none yet,
/// this server stores its own: those of its `admin.token` and `join.token` files where they
/// exist, fresh ones otherwise. Either way its files end up holding the fleet's tokens.
pub async fn shared_tokens(store: &dyn Store, data_dir: &Path) -> Result<FleetTokens, FleetError> {
    let (secret, created) = get_or_create(store, TOKENS_SECRET, || {
        let admin = token_file(data_dir, "admin.token")?.unwrap_or_else(generate_token);
        let join = token_file(data_dir, "join.token")?.unwrap_or_else(generate_token);
        Ok(fleet_secret(
            TOKENS_SECRET,
            "flotilla.io/fleet-tokens",
            &[(ADMIN_TOKEN_KEY, &admin), (JOIN_TOKEN_KEY, &join)],
        ))
    })
    .await?;
    let tokens = FleetTokens {
        admin: data_value(&secret, TOKENS_SECRET, ADMIN_TOKEN_KEY)?,
        join: data_value(&secret, TOKENS_SECRET, JOIN_TOKEN_KEY)?,
    };
    if created {
        tracing::info!(
            secret = %format!("{FLEET_NAMESPACE}/{TOKENS_SECRET}"),
            "stored the fleet's admin and join tokens"
        );
    }
    rewrite_token_file(data_dir, "admin.token", &tokens.admin)?;
    rewrite_token_file(data_dir, "join.token", &tokens.join)?;
    Ok(tokens)
}

/// The fleet's CA: its certificate and key, in PEM. Its `Debug` shows neither.
#[derive(Clone)]
pub struct FleetCa {
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for FleetCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetCa { .. }")
    }
}

/// The parameters of the fleet CA with key `key`. They are a function of the key alone (its
/// name carries a digest of the public key, so two fleets' CAs never share a name), so the
/// issuer can be rebuilt from the stored key without parsing the stored certificate.
fn ca_params(key: &KeyPair) -> Result<CertificateParams, FleetError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(|source| FleetError::Certificate {
            what: "preparing the fleet CA",
            source,
        })?;
    let digest: String = Sha256::digest(key.public_key_raw())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "flotilla");
    params
        .distinguished_name
        .push(DnType::CommonName, format!("flotilla fleet CA {digest}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl FleetCa {
    /// A new CA with a fresh key.
    pub fn generate() -> Result<Self, FleetError> {
        let cert_err = |what| move |source| FleetError::Certificate { what, source };
        let key = KeyPair::generate().map_err(cert_err("generating the fleet CA's key"))?;
        let cert = ca_params(&key)?
            .self_signed(&key)
            .map_err(cert_err("signing the fleet CA"))?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA certificate, in PEM: what clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a serving certificate for `names` (DNS names or IP addresses), signed by the CA;
    /// answers the certificate and its new key, in PEM.
    pub fn issue_serving(&self, names: &[String]) -> Result<(String, String), FleetError> {
        let cert_err = |what| move |source| FleetError::Certificate { what, source };
        let ca_key =
            KeyPair::from_pem(&self.key_pem).map_err(cert_err("reading the fleet CA's key"))?;
        let issuer = Issuer::new(ca_params(&ca_key)?, ca_key);
        let mut params = CertificateParams::new(names.to_vec())
            .map_err(cert_err("preparing a serving certificate"))?;
        let cn = names
            .iter()
            .find(|n| n.parse::<std::net::IpAddr>().is_err());
        params.distinguished_name.push(
            DnType::CommonName,
            cn.map_or("flotilla-server", String::as_str),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(cert_err("generating a serving key"))?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(cert_err("signing a serving certificate with the fleet CA"))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The CA as [`CA_SECRET`] holds it.
    fn from_secret(secret: &Value) -> Result<Self, FleetError> {
        let ca = Self {
            cert_pem: data_value(secret, CA_SECRET, CA_CERT_KEY)?,
            key_pem: data_value(secret, CA_SECRET, CA_KEY_KEY)?,
        };
        KeyPair::from_pem(&ca.key_pem).map_err(|_| FleetError::Malformed {
            secret: CA_SECRET,
            what: format!("its {CA_KEY_KEY} is no PEM private key"),
        })?;
        if !ca.cert_pem.contains("BEGIN CERTIFICATE") {
            return Err(FleetError::Malformed {
                secret: CA_SECRET,
                what: format!("its {CA_CERT_KEY} is no PEM certificate"),
            });
        }
        Ok(ca)
    }
}

/// The fleet's CA, from [`CA_SECRET`]; the first server to need it creates it.
pub async fn shared_ca(store: &dyn Store) -> Result<FleetCa, FleetError> {
    let (secret, created) = get_or_create(store, CA_SECRET, || {
        let ca = FleetCa::generate()?;
        Ok(fleet_secret(
            CA_SECRET,
            "flotilla.io/fleet-ca",
            &[(CA_CERT_KEY, &ca.cert_pem), (CA_KEY_KEY, &ca.key_pem)],
        ))
    })
    .await?;
    if created {
        tracing::info!(
            secret = %format!("{FLEET_NAMESPACE}/{CA_SECRET}"),
            "stored a new CA for the fleet's serving certificates"
        );
    }
    FleetCa::from_secret(&secret)
}

/// Whether `name` may stand in a certificate as a DNS name.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// This machine's host name, when it has a usable one.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/etc/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())?;
    let name = name.trim().to_ascii_lowercase();
    is_dns_name(&name).then_some(name)
}

/// The names a server's certificate covers: localhost, 127.0.0.1, ::1, the listen address
/// (when it is a specific one), and the host name.
pub fn serving_names(listen: SocketAddr) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    if let Some(host) = host_name() {
        if !names.contains(&host) {
            names.push(host);
        }
    }
    names
}

/// The files a server of the fleet serves HTTPS with, in its data dir.
#[derive(Clone, Debug)]
pub struct ServingFiles {
    /// `tls.crt`: this server's certificate, signed by the fleet CA, followed by the CA's (the
    /// chain it serves; as a client's CA bundle it trusts every server of the fleet).
    pub cert: PathBuf,
    /// `tls.key`: its key.
    pub key: PathBuf,
    /// `ca.crt`: the fleet CA's certificate.
    pub ca: PathBuf,
}

/// Issues this server's certificate from the fleet CA (anew at every start, for the current
/// listen address and host name) and writes `tls.crt` (that certificate, then the CA's),
/// `tls.key` and `ca.crt` into its data dir. With the CA in `tls.crt`, a client that was told
/// to trust `tls.crt`, as a single server's clients are, trusts every server of the fleet.
pub fn write_serving_files(
    data_dir: &Path,
    ca: &FleetCa,
    listen: SocketAddr,
) -> Result<ServingFiles, FleetError> {
    let names = serving_names(listen);
    let (cert_pem, key_pem) = ca.issue_serving(&names)?;
    let chain = format!("{}\n{}\n", cert_pem.trim_end(), ca.cert_pem().trim_end());
    let files = ServingFiles {
        cert: data_dir.join("tls.crt"),
        key: data_dir.join("tls.key"),
        ca: data_dir.join(CA_FILE),
    };
    for (path, content) in [
        (&files.key, key_pem.as_str()),
        (&files.cert, chain.as_str()),
        (&files.ca, ca.cert_pem()),
    ] {
        write_private(path, content.as_bytes()).map_err(|source| FleetError::File {
            path: path.clone(),
            source,
        })?;
    }
    tracing::debug!(names = ?names, "issued this server's certificate from the fleet CA");
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, StoreConfig};

    #[test]
    fn host_names_are_checked_before_they_enter_a_certificate() {
        assert!(is_dns_name("node-1.example.com"));
        assert!(is_dns_name("localhost"));
        assert!(!is_dns_name(""));
        assert!(!is_dns_name("-bad"));
        assert!(!is_dns_name("a..b"));
        assert!(!is_dns_name("under_score"));
    }

    #[test]
    fn nothing_secret_is_in_debug_output() {
        let tokens = FleetTokens {
            admin: "a-secret".into(),
            join: "j-secret".into(),
        };
        assert!(!format!("{tokens:?}").contains("secret"));
        let ca = FleetCa::generate().unwrap();
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    /// The first server stores its files' tokens; the second, with other files, adopts the
    /// store's and its files are rewritten.
    #[tokio::test]
    async fn the_first_servers_tokens_become_the_fleets() {
        let store = MemoryStore::memory(StoreConfig::default());
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("admin.token"), "chosen-admin\n").unwrap();
        let first = shared_tokens(store.as_ref(), a.path()).await.unwrap();
        assert_eq!(first.admin, "chosen-admin");
        assert_eq!(first.join.len(), 64, "a fresh join token");
        let join_file = std::fs::read_to_string(a.path().join("join.token")).unwrap();
        assert_eq!(join_file, first.join);

        std::fs::write(b.path().join("join.token"), "other-join").unwrap();
        let second = shared_tokens(store.as_ref(), b.path()).await.unwrap();
        assert_eq!(second, first);
        for (file, want) in [("admin.token", &first.admin), ("join.token", &first.join)] {
            let got = std::fs::read_to_string(b.path().join(file)).unwrap();
            assert_eq!(&got, want, "{file} rewritten");
        }
    }

    #[tokio::test]
    async fn a_malformed_tokens_secret_is_named() {
        let store = MemoryStore::memory(StoreConfig::default());
        store
            .create(
                &secrets(),
                fleet_secret(
                    TOKENS_SECRET,
                    "flotilla.io/fleet-tokens",
                    &[(ADMIN_TOKEN_KEY, "x")],
                ),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = shared_tokens(store.as_ref(), dir.path()).await.unwrap_err();
        assert!(err.to_string().contains("join-token"), "{err}");
        assert!(err.to_string().contains(TOKENS_SECRET), "{err}");
    }

    /// Two servers get the same CA, and a certificate one issues verifies against the CA's
    /// certificate alone.
    #[tokio::test]
    async fn every_server_gets_the_same_ca() {
        let store = MemoryStore::memory(StoreConfig::default());
        let first = shared_ca(store.as_ref()).await.unwrap();
        let second = shared_ca(store.as_ref()).await.unwrap();
        assert_eq!(first.cert_pem(), second.cert_pem());
        let (cert, key) = second
            .issue_serving(&["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
        assert!(cert.contains("BEGIN CERTIFICATE") && key.contains("PRIVATE KEY"));
        assert_ne!(cert, first.cert_pem());
    }
}
