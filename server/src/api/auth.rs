//! Bearer-token authentication. Three kinds of token exist: the admin token
//! (`<data-dir>/admin.token`, may do everything), the join token (`<data-dir>/join.token`, may
//! only register a pull member at `/flotilla/v1/register`), and member credentials handed out
//! by registration, each scoped to its own cluster (see [`super::authz`]) and revoked when
//! that cluster is deleted (see [`super::registration`]). Every call needs a
//! token except the public probes (`/healthz`, `/livez`, `/readyz`, `/version`). Tokens are
//! compared in constant time, member credentials are kept only as SHA-256 hashes, and no token
//! is ever logged.

use super::authz;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::RwLock;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The holder of the admin token.
    Admin,
    /// The agent of one member cluster.
    Agent {
        /// The cluster it may act for.
        cluster: String,
    },
}

/// Checks bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    admin_token: Arc<String>,
    join_token: Arc<String>,
    /// SHA-256 (hex) of a member credential -> its cluster.
    agents: Arc<RwLock<HashMap<String, String>>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator { .. }")
    }
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// SHA-256 of a token, hex.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Authenticator {
    /// An authenticator for the admin and join tokens.
    pub fn new(admin_token: String, join_token: String) -> Self {
        Self {
            admin_token: Arc::new(admin_token),
            join_token: Arc::new(join_token),
            agents: Arc::new(RwLock::new(HashMap::new())),
        }
    }

    /// The principal a bearer token stands for.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        if same(token, &self.admin_token) {
            return Some(Principal::Admin);
        }
        let hash = token_hash(token);
        self.agents
            .read()
            .get(&hash)
            .map(|cluster| Principal::Agent {
                cluster: cluster.clone(),
            })
    }

    /// Whether `token` is the join token.
    pub fn is_join_token(&self, token: &str) -> bool {
        same(token, &self.join_token)
    }

    /// Makes `hash` the one valid credential of `cluster` (replacing an older one).
    pub fn set_agent_credential(&self, cluster: &str, hash: &str) {
        let mut agents = self.agents.write();
        agents.retain(|_, c| c != cluster);
        agents.insert(hash.to_string(), cluster.to_string());
    }

    /// Revokes the credential of `cluster`, if it has one; answers whether it had.
    pub fn revoke_agent_credential(&self, cluster: &str) -> bool {
        let mut agents = self.agents.write();
        let before = agents.len();
        agents.retain(|_, c| c != cluster);
        agents.len() != before
    }
}

/// A fresh random token: 32 bytes, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Paths anyone may call (registration checks the join token itself).
pub fn is_public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/livez" | "/version" | "/flotilla/v1/register"
    )
}

/// The bearer token of a request, if any.
pub fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// How much of an unread request body is read before an early refusal, and for how long.
const DRAIN_LIMIT: usize = 256 * 1024;
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and drops what is left of a request body (at most [`DRAIN_LIMIT`] bytes, for at most
/// [`DRAIN_TIMEOUT`]) before a refusal is sent, as Go's net/http server does: over HTTP/2 an
/// answer sent while the client is still sending ends the stream with a reset, and curl then
/// reports a framing error (code 000) instead of the 401 or 403.
pub async fn drain(body: axum::body::Body) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, axum::body::to_bytes(body, DRAIN_LIMIT)).await;
}

/// Middleware: rejects requests without a valid bearer token (401) and member agents' calls
/// outside their scope (403); records the principal for handlers.
pub async fn require_token(
    State(auth): State<Authenticator>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if is_public(req.uri().path()) {
        return Ok(next.run(req).await);
    }
    let Some(principal) = bearer(&req).and_then(|t| auth.authenticate(t)) else {
        drain(req.into_body()).await;
        return Err(ApiError::Unauthorized);
    };
    if let Principal::Agent { cluster } = &principal {
        if !authz::agent_may(cluster, req.method().as_str(), req.uri().path()) {
            let err = ApiError::Forbidden(format!(
                "the agent of cluster {cluster:?} may not {} {}",
                req.method(),
                req.uri().path()
            ));
            drain(req.into_body()).await;
            return Err(err);
        }
    }
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_principals() {
        let admin = generate_token();
        let join = generate_token();
        assert_eq!(admin.len(), 64);
        let auth = Authenticator::new(admin.clone(), join.clone());
        assert_eq!(auth.authenticate(&admin), Some(Principal::Admin));
        assert_eq!(auth.authenticate(&admin[..63]), None);
        assert_eq!(auth.authenticate(""), None);
        assert_eq!(
            auth.authenticate(&join),
            None,
            "the join token is no API credential"
        );
        assert!(auth.is_join_token(&join));
        let cred = generate_token();
        auth.set_agent_credential("member1", &token_hash(&cred));
        assert_eq!(
            auth.authenticate(&cred),
            Some(Principal::Agent {
                cluster: "member1".into()
            })
        );
        // A new credential for the same cluster revokes the old one.
        let cred2 = generate_token();
        auth.set_agent_credential("member1", &token_hash(&cred2));
        assert_eq!(auth.authenticate(&cred), None);
        assert!(auth.authenticate(&cred2).is_some());
        // Revoking it ends it; nothing is left to revoke then.
        assert!(auth.revoke_agent_credential("member1"));
        assert_eq!(auth.authenticate(&cred2), None);
        assert!(!auth.revoke_agent_credential("member1"));
        assert!(!format!("{auth:?}").contains(&admin));
    }
}
