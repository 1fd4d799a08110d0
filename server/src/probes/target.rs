//! Who a push member is and how it is reached: its endpoint and, for a Kubernetes API server,
//! the credential from the Cluster's `spec.secretRef` (`controllers/members/member_credentials.rs`
//! reads it). Secrets never reach a log: the credential's `Debug` hides them.

use std::fmt;

/// One push member, as the controllers hand it to a [`super::MemberClient`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberTarget {
    /// The Cluster's name.
    pub cluster: String,
    /// `spec.apiEndpoint`.
    pub endpoint: String,
    /// How it is reached.
    pub access: MemberAccess,
}

impl MemberTarget {
    /// A simulated member's HTTP surface at `endpoint` (tests and `flotilla-agent --mode push`).
    pub fn surface(cluster: &str, endpoint: &str) -> Self {
        MemberTarget {
            cluster: cluster.to_string(),
            endpoint: endpoint.to_string(),
            access: MemberAccess::Surface,
        }
    }
}

/// How a push member is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberAccess {
    /// Flotilla's member HTTP surface (a Cluster without `spec.secretRef`).
    Surface,
    /// A Kubernetes API server, with the credential of `spec.secretRef`.
    Kube(KubeCredential),
    /// The Cluster names a credential that cannot be used; every call fails with this reason
    /// (it becomes the Ready condition's message).
    Broken(String),
}

/// What reaches a member's Kubernetes API: Karmada's Secret fields `token` and `caBundle`, and
/// the Cluster's `insecureSkipTLSVerification` and `proxyURL`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KubeCredential {
    /// The bearer token.
    pub token: String,
    /// PEM certificates to trust; `None` with `insecure_skip_tls_verification`.
    pub ca_bundle: Option<Vec<u8>>,
    /// Skip verifying the member's certificate.
    pub insecure_skip_tls_verification: bool,
    /// Proxy to reach the member through (empty: none).
    pub proxy_url: String,
}

impl fmt::Debug for KubeCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCredential")
            .field("token", &"<redacted>")
            .field("ca_bundle_bytes", &self.ca_bundle.as_ref().map(Vec::len))
            .field(
                "insecure_skip_tls_verification",
                &self.insecure_skip_tls_verification,
            )
            .field("proxy_url", &self.proxy_url)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_never_prints_its_token() {
        let c = KubeCredential {
            token: "s3cret-token".into(),
            ca_bundle: Some(b"pem".to_vec()),
            insecure_skip_tls_verification: false,
            proxy_url: String::new(),
        };
        let printed = format!("{:?}", MemberAccess::Kube(c));
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(printed.contains("<redacted>"), "{printed}");
    }
}
