//! How the kube runtime reaches a member's API server: a [`kube::Client`] from a kubeconfig
//! (a file and context, or `KUBECONFIG` / `~/.kube/config`), from the pod's service account
//! (in-cluster), or from an endpoint with a bearer token and a CA bundle, as a push-mode
//! Cluster's `spec.apiEndpoint` and `spec.secretRef` give them (`token`, `caBundle`, and
//! `insecureSkipTLSVerification`).
//!
//! TLS is rustls with the ring provider: the workspace compiles rustls with `ring` only
//! (kube's `ring` feature, reqwest's `rustls-tls`), so rustls picks ring as the process
//! default by itself and no other provider can be chosen by accident.

use std::path::Path;

use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig file could not be read, or has no such context.
    #[error("kubeconfig {path}")]
    Kubeconfig {
        /// The file (or `KUBECONFIG / ~/.kube/config`).
        path: String,
        /// What failed.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster service account was found.
    #[error("no kubeconfig (KUBECONFIG, ~/.kube/config) and no in-cluster service account")]
    Infer(#[source] kube::config::InferConfigError),
    /// The in-cluster service account (token and CA) could not be read.
    #[error("in-cluster configuration (service account token and CA)")]
    InCluster(#[source] kube::config::InClusterError),
    /// The endpoint is not a URL.
    #[error("member API endpoint {url:?} is not a URL")]
    Url {
        /// The endpoint as given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The CA bundle holds no certificate, or one that is not base64.
    #[error("CA bundle: {0}")]
    CaBundle(String),
    /// The bearer token is empty or unusable.
    #[error("the member API token {0}")]
    Token(String),
    /// kube refused the configuration (e.g. a TLS setting).
    #[error("building the client of {url}")]
    Client {
        /// The member API URL.
        url: String,
        /// What failed.
        #[source]
        source: kube::Error,
    },
}

/// A client from a kubeconfig: `path` (else `KUBECONFIG` / `~/.kube/config`) at `context`
/// (else its current context). With neither a path nor a context, [`Config::infer`]: a
/// kubeconfig when there is one, else the in-cluster service account.
pub async fn client_from_kubeconfig(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ConnectError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (path, context) {
        (Some(path), _) => {
            let shown = path.display().to_string();
            let file = Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                path: shown.clone(),
                source,
            })?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    path: shown,
                    source,
                })?
        }
        (None, Some(_)) => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    path: "KUBECONFIG / ~/.kube/config".into(),
                    source,
                })?
        }
        (None, None) => Config::infer().await.map_err(ConnectError::Infer)?,
    };
    build(config)
}

/// A client from the pod's service account only (`KUBERNETES_SERVICE_HOST`, the token and
/// CA under `/var/run/secrets/kubernetes.io/serviceaccount/`).
pub fn client_in_cluster() -> Result<Client, ConnectError> {
    build(Config::incluster().map_err(ConnectError::InCluster)?)
}

/// A client of the API server at `url` with a bearer `token`, trusting the PEM certificates
/// of `ca_pem` (the platform's roots when `None`), or no certificate at all when
/// `insecure_skip_tls_verify` (then `ca_pem` is not needed).
pub fn client_for_endpoint(
    url: &str,
    token: &str,
    ca_pem: Option<&[u8]>,
    insecure_skip_tls_verify: bool,
) -> Result<Client, ConnectError> {
    let token = token.trim();
    if token.is_empty() {
        return Err(ConnectError::Token("is empty".into()));
    }
    let uri = url.parse().map_err(|source| ConnectError::Url {
        url: url.to_string(),
        source,
    })?;
    let mut config = Config::new(uri);
    config.accept_invalid_certs = insecure_skip_tls_verify;
    if let Some(pem) = ca_pem.filter(|_| !insecure_skip_tls_verify) {
        config.root_cert = Some(pem_certificates(pem)?);
    }
    // The token is a secret string inside kube; going through serde keeps this crate free of
    // the secrecy crate.
    config.auth_info = serde_json::from_value::<AuthInfo>(serde_json::json!({"token": token}))
        .map_err(|e| ConnectError::Token(format!("is unusable: {e}")))?;
    build(config)
}

fn build(config: Config) -> Result<Client, ConnectError> {
    let url = config.cluster_url.to_string();
    Client::try_from(config).map_err(|source| ConnectError::Client { url, source })
}

/// The DER certificates of a PEM bundle (every `CERTIFICATE` block, in order; other blocks
/// are skipped). At least one is required.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, ConnectError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::str::from_utf8(pem)
        .map_err(|_| ConnectError::CaBundle("not PEM text (not UTF-8)".into()))?;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let body_and_more = &rest[start + BEGIN.len()..];
        let Some(end) = body_and_more.find(END) else {
            return Err(ConnectError::CaBundle(format!(
                "certificate {} has no END line",
                out.len() + 1
            )));
        };
        let body: String = body_and_more[..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        // k8s-openapi's ByteString is base64 on the wire: its decoder is the one we need.
        let der: k8s_openapi::ByteString = serde_json::from_value(serde_json::Value::String(body))
            .map_err(|e| {
                ConnectError::CaBundle(format!("certificate {} is not base64: {e}", out.len() + 1))
            })?;
        out.push(der.0);
        rest = &body_and_more[end + END.len()..];
    }
    if out.is_empty() {
        return Err(ConnectError::CaBundle(
            "no PEM CERTIFICATE block found".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_bundles_decode_to_der() {
        // "hello" and "world!" in base64, as two certificate blocks around a key block.
        let two = b"junk\n-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n\
            -----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n\
            -----BEGIN CERTIFICATE-----\r\nd29ybGQh\r\n-----END CERTIFICATE-----\n";
        type Want = Result<Vec<&'static [u8]>, &'static str>;
        let cases: [(&[u8], Want); 5] = [
            (two, Ok(vec![b"hello", b"world!"])),
            (b"", Err("no PEM CERTIFICATE block")),
            (
                b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n",
                Err("has no END line"),
            ),
            (
                b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----",
                Err("not base64"),
            ),
            (&[0xff, 0xfe], Err("not UTF-8")),
        ];
        for (i, (pem, want)) in cases.into_iter().enumerate() {
            match (pem_certificates(pem), want) {
                (Ok(got), Ok(want)) => {
                    let want: Vec<Vec<u8>> = want.into_iter().map(<[u8]>::to_vec).collect();
                    assert_eq!(got, want, "case {i}");
                }
                (Err(e), Err(want)) => assert!(e.to_string().contains(want), "case {i}: {e}"),
                (got, want) => panic!("case {i}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[tokio::test]
    async fn endpoints_are_checked() {
        let cases = [
            (
                "https://127.0.0.1:6443",
                "",
                None,
                false,
                Some("token is empty"),
            ),
            ("not a url", "t", None, false, Some("is not a URL")),
            (
                "https://127.0.0.1:6443",
                "t",
                Some(&b"nothing"[..]),
                false,
                Some("no PEM CERTIFICATE"),
            ),
            // Skipping verification needs no CA (and ignores a bad one).
            (
                "https://127.0.0.1:6443",
                "t",
                Some(&b"nothing"[..]),
                true,
                None,
            ),
            ("http://127.0.0.1:8080", "t", None, false, None),
        ];
        for (url, token, ca, insecure, want) in cases {
            let got = client_for_endpoint(url, token, ca, insecure);
            match (got, want) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => {
                    assert!(e.to_string().contains(want), "{url}: {e}")
                }
                (Ok(_), Some(want)) => panic!("{url}: built, want {want}"),
                (Err(e), None) => panic!("{url}: {}", flotilla_support::error_chain(&e)),
            }
        }
    }
}
