//! Bearer-token authentication, the one place every request's credential is checked. Three
//! kinds of token exist: the admin token (`<data-dir>/admin.token`, may do everything), the
//! join token (`<data-dir>/join.token`, may only register a pull member at
//! `/flotilla/v1/register`), and member credentials handed out by registration, each scoped to
//! its own cluster (see [`super::authz`]) and revoked when that cluster is deleted or registered
//! again (see [`super::registration`]).
//!
//! Every call needs a token except the public probes (`/healthz`, `/livez`, `/readyz`,
//! `/version`), which answer anonymous calls. A token that is presented is checked on every
//! path, probes included, as kube-apiserver does: a revoked or unknown bearer token is 401
//! wherever it is sent. A revoked member credential also ends the watches it opened: each one
//! gets an `ERROR` event with a 401 `Status` and closes, so nothing more reaches its holder.
//! Tokens are compared in constant time, member credentials are kept only as SHA-256 hashes,
//! and no token is ever logged.

use super::authz;
use super::error::ApiError;
use super::options::Params;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use futures::stream::{self, StreamExt};
use parking_lot::RwLock;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::sync::watch;

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

/// What a valid bearer token stands for, as the middleware found it.
#[derive(Clone, Debug)]
pub struct Credential {
    /// Who calls.
    pub principal: Principal,
    /// For a member credential: fires when it is revoked (the admin token never is).
    pub revocation: Option<Revocation>,
}

/// The signal that a member credential was revoked (replaced by a new registration, or its
/// Cluster or Secret deleted). It fires when the credential leaves the [`Authenticator`], so
/// no way of revoking can forget it.
#[derive(Clone, Debug)]
pub struct Revocation(watch::Receiver<()>);

impl Revocation {
    /// Whether the credential has been revoked.
    pub fn is_revoked(&self) -> bool {
        self.0.has_changed().is_err()
    }

    /// Completes once the credential is revoked.
    pub async fn revoked(mut self) {
        // Nothing is ever sent: `changed` answers `Err` when the credential's sender is
        // dropped, which is its revocation.
        while self.0.changed().await.is_ok() {}
    }
}

/// A member credential the authenticator knows.
struct MemberCredential {
    /// The cluster it acts for.
    cluster: String,
    /// Dropped with the entry: its receivers ([`Revocation`]) then see the credential revoked.
    alive: watch::Sender<()>,
}

/// Checks bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    admin_token: Arc<String>,
    join_token: Arc<String>,
    /// SHA-256 (hex) of a member credential -> its cluster.
    agents: Arc<RwLock<HashMap<String, MemberCredential>>>,
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
        self.credential(token).map(|c| c.principal)
    }

    /// What a bearer token stands for, with the signal of its revocation; `None` for a token
    /// that is unknown or revoked (the join token included: it is no API credential).
    pub fn credential(&self, token: &str) -> Option<Credential> {
        if same(token, &self.admin_token) {
            return Some(Credential {
                principal: Principal::Admin,
                revocation: None,
            });
        }
        let hash = token_hash(token);
        self.agents.read().get(&hash).map(|member| Credential {
            principal: Principal::Agent {
                cluster: member.cluster.clone(),
            },
            revocation: Some(Revocation(member.alive.subscribe())),
        })
    }

    /// Whether `token` is the join token.
    pub fn is_join_token(&self, token: &str) -> bool {
        same(token, &self.join_token)
    }

    /// Makes `hash` the one valid credential of `cluster` (replacing an older one).
    pub fn set_agent_credential(&self, cluster: &str, hash: &str) {
        let mut agents = self.agents.write();
        agents.retain(|_, c| c.cluster != cluster);
        agents.insert(
            hash.to_string(),
            MemberCredential {
                cluster: cluster.to_string(),
                alive: watch::channel(()).0,
            },
        );
    }

    /// Revokes the credential of `cluster`, if it has one; answers whether it had.
    pub fn revoke_agent_credential(&self, cluster: &str) -> bool {
        let mut agents = self.agents.write();
        let before = agents.len();
        agents.retain(|_, c| c.cluster != cluster);
        agents.len() != before
    }
}

/// A fresh random token: 32 bytes, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path where pull members register; registration checks the join token itself.
pub const REGISTER_PATH: &str = "/flotilla/v1/register";

/// The probes that answer anonymous calls: the health probes and `/version` (what Kubernetes'
/// `system:public-info-viewer` role opens). A token sent to them is still checked.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/livez" | "/version")
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

/// Middleware, the one place a request's credential is checked: a presented bearer token must
/// be valid on every path (401 otherwise, also on the probes), a request without one reaches
/// only the public paths (401 elsewhere), and member agents' calls outside their scope are 403.
/// Records the principal for handlers, and ties a member's watch to its credential
/// ([`end_on_revocation`]).
pub async fn require_token(
    State(auth): State<Authenticator>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let path = req.uri().path();
    if path == REGISTER_PATH {
        return Ok(next.run(req).await);
    }
    let credential = match bearer(&req) {
        None if is_probe(path) => return Ok(next.run(req).await),
        None => None,
        Some(token) => auth.credential(token),
    };
    let Some(Credential {
        principal,
        revocation,
    }) = credential
    else {
        tracing::debug!(path = %req.uri().path(), "request without a valid credential refused");
        drain(req.into_body()).await;
        return Err(ApiError::Unauthorized);
    };
    if let Principal::Agent { cluster } = &principal {
        let path = req.uri().path();
        if !is_probe(path) && !authz::agent_may(cluster, req.method().as_str(), path) {
            let err = ApiError::Forbidden(format!(
                "the agent of cluster {cluster:?} may not {} {}",
                req.method(),
                path
            ));
            drain(req.into_body()).await;
            return Err(err);
        }
    }
    let watching = is_watch(&req);
    req.extensions_mut().insert(principal);
    let response = next.run(req).await;
    Ok(match revocation {
        Some(revocation) if watching && response.status() == StatusCode::OK => {
            end_on_revocation(response, revocation)
        }
        _ => response,
    })
}

/// Whether a request opens a watch (`GET` with `watch=true` or `watch=1`).
fn is_watch(req: &Request) -> bool {
    req.method() == Method::GET
        && Params::parse(req.uri().query())
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
}

/// A watch answer that lasts only as long as the credential that opened it: once `revocation`
/// fires, the stream gets an `ERROR` event with a 401 `Status` (as a watch reports any error)
/// and ends, so the holder of a revoked credential reads nothing more, and its client relists
/// into the 401. The watch's own lines are whole frames, so the error line never splits one.
pub fn end_on_revocation(response: Response, revocation: Revocation) -> Response {
    let (parts, body) = response.into_parts();
    let data = body
        .into_data_stream()
        .take_until(revocation.clone().revoked());
    // Once the data ends, the error line follows only if it ended because of the revocation.
    let error = stream::once(async move { revocation.is_revoked() }).filter_map(|revoked| {
        let line = revoked.then(|| {
            let status = ApiError::Unauthorized.to_status();
            let line = serde_json::json!({"type": "ERROR", "object": status});
            Ok(Bytes::from(format!("{line}\n")))
        });
        futures::future::ready(line)
    });
    let pieces = data.chain(error);
    Response::from_parts(parts, Body::from_stream(pieces))
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

    #[test]
    fn every_way_of_revoking_fires_the_revocation() {
        let auth = Authenticator::new(generate_token(), generate_token());
        let admin = auth.credential(&auth.admin_token.clone()).unwrap();
        assert!(
            admin.revocation.is_none(),
            "the admin token is never revoked"
        );
        let watched = |token: &str| auth.credential(token).unwrap().revocation.unwrap();
        let (m1, m2) = (generate_token(), generate_token());
        auth.set_agent_credential("m1", &token_hash(&m1));
        auth.set_agent_credential("m2", &token_hash(&m2));
        let (r1, r2) = (watched(&m1), watched(&m2));
        assert!(!r1.is_revoked() && !r2.is_revoked());
        // A new registration of m1 revokes its former credential, not m2's.
        auth.set_agent_credential("m1", &token_hash(&generate_token()));
        assert!(r1.is_revoked());
        assert!(!r2.is_revoked());
        // An explicit revocation (a deleted Cluster or Secret).
        auth.revoke_agent_credential("m2");
        assert!(r2.is_revoked());
    }

    /// A watch body that never ends by itself, as an open watch with no events.
    fn open_watch(first: &'static str) -> Response {
        let lines = stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(first))])
            .chain(stream::pending());
        Response::new(Body::from_stream(lines))
    }

    #[tokio::test]
    async fn a_revoked_credential_ends_its_watch_with_a_401_error_event() {
        let auth = Authenticator::new(generate_token(), generate_token());
        let token = generate_token();
        auth.set_agent_credential("m1", &token_hash(&token));
        let revocation = auth.credential(&token).unwrap().revocation.unwrap();
        let mut body = end_on_revocation(open_watch("{\"type\":\"ADDED\"}\n"), revocation)
            .into_body()
            .into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        assert_eq!(first, Bytes::from("{\"type\":\"ADDED\"}\n"));
        auth.set_agent_credential("m1", &token_hash(&generate_token()));
        let last = body.next().await.unwrap().unwrap();
        let event: serde_json::Value = serde_json::from_slice(&last).unwrap();
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["kind"], "Status");
        assert_eq!(event["object"]["code"], 401);
        assert_eq!(event["object"]["reason"], "Unauthorized");
        assert!(
            body.next().await.is_none(),
            "the watch ends after the error"
        );
    }

    #[tokio::test]
    async fn a_watch_that_ends_by_itself_ends_while_its_credential_lives() {
        let auth = Authenticator::new(generate_token(), generate_token());
        let token = generate_token();
        auth.set_agent_credential("m1", &token_hash(&token));
        let revocation = auth.credential(&token).unwrap().revocation.unwrap();
        let answer = Response::new(Body::from("{\"type\":\"ADDED\"}\n"));
        let bytes = axum::body::to_bytes(
            end_on_revocation(answer, revocation).into_body(),
            usize::MAX,
        )
        .await
        .unwrap();
        assert_eq!(bytes, Bytes::from("{\"type\":\"ADDED\"}\n"));
    }
}
