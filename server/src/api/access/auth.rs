//! Bearer-token authentication, the one place every request's credential is checked. Three
//! kinds of token exist: the admin token (`<data-dir>/admin.token`, may do everything), the
//! join token (`<data-dir>/join.token`, may only register a pull member at
//! `/flotilla/v1/register`), and member credentials handed out by registration, each scoped to
//! its own cluster (see [`super::authz`]) and revoked when that cluster is deleted or registered
//! again (see [`super::registration`]). Servers sharing an etcd store share the admin and join
//! tokens through it ([`crate::fleet`]).
//!
//! Every call needs a token except the public probes (`/healthz`, `/livez`, `/readyz`,
//! `/version`) and the fleet page (`/ui`, which holds no data: it asks its user for a token),
//! which answer anonymous calls. A token that is presented is checked on every
//! path, probes included, as kube-apiserver does: a revoked or unknown bearer token is 401
//! wherever it is sent. A revoked member credential also ends the watches it opened: each one
//! gets an `ERROR` event with a 401 `Status` and closes, so nothing more reaches its holder.
//! Tokens are compared in constant time, member credentials are kept only as SHA-256 hashes,
//! and no token is ever logged.
//!
//! The member credentials in memory follow their Secrets in the store
//! ([`super::credential_feed`]), so with several servers on one store a credential issued or
//! revoked through one is accepted or refused by all. Each cluster's entry remembers the store
//! revision it is known at: a change that arrives late never undoes a newer one, and a
//! credential revoked here stays revoked until the store's deletion of it arrives.

use super::authz;
use crate::api::error::ApiError;
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

/// How far this server's knowledge of one cluster's credential reaches in the store, so that
/// an older change, arriving late through the credential feed, never undoes a newer one.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Floor {
    /// Every change of the credential Secret up to this store revision is applied.
    At(u64),
    /// Revoked here, ahead of the store: the Secret's deletion is not seen yet. Changes up to
    /// `after` are applied; until the deletion arrives, the revoked hash is refused however
    /// often the feed repeats it, while a credential of a new registration is accepted.
    Revoked {
        /// The floor when the credential was revoked.
        after: u64,
        /// The hash that was revoked, if the cluster had a credential.
        hash: Option<String>,
    },
}

impl Floor {
    /// The revision up to which changes are known.
    fn revision(&self) -> u64 {
        match self {
            Floor::At(r) => *r,
            Floor::Revoked { after, .. } => *after,
        }
    }
}

/// What applying a stored change of a member credential did to the authenticator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CredentialChange {
    /// A new credential is accepted (the cluster's former one, if any, is revoked).
    Accepted,
    /// The cluster's credential is revoked.
    Revoked,
    /// Nothing to do: the credential is already as the change says.
    Unchanged,
    /// Older than what this server already applied (its own write, or a later change): ignored.
    Stale,
}

/// The member credentials, by hash, and how far each cluster's is known.
#[derive(Default)]
struct Agents {
    /// SHA-256 (hex) of a member credential -> its cluster.
    by_hash: HashMap<String, MemberCredential>,
    /// Per cluster: the store revision its credential is known at (see [`Floor`]).
    floors: HashMap<String, Floor>,
}

impl Agents {
    /// The hash of `cluster`'s credential, if it has one.
    fn hash_of(&self, cluster: &str) -> Option<String> {
        self.by_hash
            .iter()
            .find(|(_, c)| c.cluster == cluster)
            .map(|(h, _)| h.clone())
    }

    /// Drops `cluster`'s credential (which fires its revocation); answers whether it had one.
    fn remove(&mut self, cluster: &str) -> bool {
        let before = self.by_hash.len();
        self.by_hash.retain(|_, c| c.cluster != cluster);
        self.by_hash.len() != before
    }

    /// Makes `hash` the one credential of `cluster`: answers `Unchanged` (its revocation
    /// signal untouched, so open watches go on) when it already is.
    fn put(&mut self, cluster: &str, hash: &str) -> CredentialChange {
        if self.by_hash.get(hash).is_some_and(|c| c.cluster == cluster) {
            return CredentialChange::Unchanged;
        }
        self.remove(cluster);
        self.by_hash.insert(
            hash.to_string(),
            MemberCredential {
                cluster: cluster.to_string(),
                alive: watch::channel(()).0,
            },
        );
        CredentialChange::Accepted
    }

    /// Whether a change of `cluster`'s credential to `hash` at `revision` is older than what
    /// is known.
    fn is_stale(&self, cluster: &str, hash: Option<&str>, revision: u64) -> bool {
        match self.floors.get(cluster) {
            None => false,
            Some(Floor::At(at)) => revision <= *at,
            Some(Floor::Revoked { after, hash: gone }) => {
                revision <= *after || (hash.is_some() && hash == gone.as_deref())
            }
        }
    }
}

/// Checks bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    admin_token: Arc<String>,
    join_token: Arc<String>,
    agents: Arc<RwLock<Agents>>,
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
            agents: Arc::new(RwLock::new(Agents::default())),
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
        self.agents
            .read()
            .by_hash
            .get(&hash)
            .map(|member| Credential {
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

    /// Makes `hash` the one valid credential of `cluster` (replacing an older one), whatever
    /// the store says; setting the credential it has already changes nothing.
    pub fn set_agent_credential(&self, cluster: &str, hash: &str) {
        let mut agents = self.agents.write();
        agents.floors.remove(cluster);
        agents.put(cluster, hash);
    }

    /// Applies a stored credential: `cluster`'s credential Secret holds `hash` as of store
    /// revision `revision` (its own write, or what the credential feed saw). A change older
    /// than what this server knows of the cluster is ignored, so a late event never brings
    /// back a credential that was replaced or revoked since.
    pub fn apply_agent_credential(
        &self,
        cluster: &str,
        hash: &str,
        revision: u64,
    ) -> CredentialChange {
        let mut agents = self.agents.write();
        if agents.is_stale(cluster, Some(hash), revision) {
            return CredentialChange::Stale;
        }
        agents
            .floors
            .insert(cluster.to_string(), Floor::At(revision));
        agents.put(cluster, hash)
    }

    /// Applies the removal of `cluster`'s credential at store revision `revision` (its Secret
    /// deleted, being deleted, or without a hash): its credential is revoked unless this
    /// server knows a newer one. `settled` says whether every later change will reach this
    /// server through the feed (the feed's own events): the cluster's floor is then dropped;
    /// a server's own deletion keeps it, so that the feed's late events of the deleted
    /// credential are refused.
    pub fn apply_agent_removal(
        &self,
        cluster: &str,
        revision: u64,
        settled: bool,
    ) -> CredentialChange {
        let mut agents = self.agents.write();
        if agents
            .floors
            .get(cluster)
            .is_some_and(|floor| floor.revision() > revision)
        {
            return CredentialChange::Stale;
        }
        if settled {
            agents.floors.remove(cluster);
        } else {
            agents
                .floors
                .insert(cluster.to_string(), Floor::At(revision));
        }
        if agents.remove(cluster) {
            CredentialChange::Revoked
        } else {
            CredentialChange::Unchanged
        }
    }

    /// Replaces every member credential with those of a fresh list of the credential Secrets
    /// (cluster -> hash) read at store revision `revision`: what this server learnt after it
    /// (a newer own write or revocation) is kept. Answers each cluster that changed.
    pub fn replace_agent_credentials(
        &self,
        credentials: &HashMap<String, String>,
        revision: u64,
    ) -> Vec<(String, CredentialChange)> {
        let mut agents = self.agents.write();
        let mut changes = Vec::new();
        for (cluster, hash) in credentials {
            if agents.is_stale(cluster, Some(hash), revision) {
                continue;
            }
            agents.floors.insert(cluster.clone(), Floor::At(revision));
            let change = agents.put(cluster, hash);
            if change != CredentialChange::Unchanged {
                changes.push((cluster.clone(), change));
            }
        }
        let mut known: Vec<String> = agents.by_hash.values().map(|c| c.cluster.clone()).collect();
        known.extend(agents.floors.keys().cloned());
        known.sort();
        known.dedup();
        for cluster in known {
            if credentials.contains_key(&cluster) {
                continue;
            }
            if matches!(agents.floors.get(&cluster), Some(f) if f.revision() > revision) {
                continue;
            }
            agents.floors.remove(&cluster);
            if agents.remove(&cluster) {
                changes.push((cluster, CredentialChange::Revoked));
            }
        }
        changes
    }

    /// Revokes the credential of `cluster` at once, ahead of the store (a deleted Cluster or
    /// credential Secret); answers whether it had one. Until the Secret's deletion reaches
    /// this server, the credential feed does not bring the revoked credential back.
    pub fn revoke_agent_credential(&self, cluster: &str) -> bool {
        let mut agents = self.agents.write();
        let hash = agents.hash_of(cluster);
        let after = agents.floors.get(cluster).map_or(0, Floor::revision);
        let revoked = agents.remove(cluster);
        let hash = match agents.floors.get(cluster) {
            Some(Floor::Revoked { hash: before, .. }) if hash.is_none() => before.clone(),
            _ => hash,
        };
        agents
            .floors
            .insert(cluster.to_string(), Floor::Revoked { after, hash });
        revoked
    }

    /// The clusters that hold a credential (for tests and diagnostics).
    pub fn agent_clusters(&self) -> Vec<String> {
        let mut clusters: Vec<String> = self
            .agents
            .read()
            .by_hash
            .values()
            .map(|c| c.cluster.clone())
            .collect();
        clusters.sort();
        clusters
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

/// The token check's state: the [`Authenticator`] and which paths answer anonymous calls.
#[derive(Clone)]
pub struct Gate {
    /// The credentials.
    pub auth: Authenticator,
    /// The public paths besides the probes (the router names the fleet page's files, which
    /// hold no data).
    pub also_public: fn(&str) -> bool,
}

impl Gate {
    /// Whether `path` answers anonymous calls: the health probes and `/version` (what
    /// Kubernetes' `system:public-info-viewer` role opens), and [`Gate::also_public`]. A token
    /// sent to them is still checked.
    fn is_public(&self, path: &str) -> bool {
        matches!(path, "/healthz" | "/readyz" | "/livez" | "/version") || (self.also_public)(path)
    }
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
    State(gate): State<Gate>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let path = req.uri().path();
    if path == REGISTER_PATH {
        return Ok(next.run(req).await);
    }
    let credential = match bearer(&req) {
        None if gate.is_public(path) => return Ok(next.run(req).await),
        None => None,
        Some(token) => gate.auth.credential(token),
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
        if !gate.is_public(path) && !authz::agent_may(cluster, req.method().as_str(), path) {
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
        && form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .filter(|(k, _)| k == "watch")
            .last()
            .is_some_and(|(_, w)| w == "true" || w == "1")
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

    /// The store's changes of a credential apply in revision order: whatever this server
    /// knows at a later revision (its own write, a later event) is never undone by an older
    /// change arriving late, and a change it has seen already keeps open watches open.
    /// A fresh authenticator and three member tokens with their hashes.
    fn three_tokens() -> (Authenticator, [String; 3], [String; 3]) {
        let auth = Authenticator::new(generate_token(), generate_token());
        let tokens = [generate_token(), generate_token(), generate_token()];
        let hashes = tokens.clone().map(|t| token_hash(&t));
        (auth, tokens, hashes)
    }

    #[test]
    fn older_changes_never_undo_newer_ones() {
        use CredentialChange::*;
        let (auth, [_, t1, t2], [h0, h1, h2]) = three_tokens();
        assert_eq!(auth.apply_agent_credential("m1", &h1, 5), Accepted);
        let watching = auth.credential(&t1).unwrap().revocation.unwrap();
        assert_eq!(auth.apply_agent_credential("m1", &h0, 3), Stale);
        assert_eq!(
            auth.apply_agent_credential("m1", &h1, 5),
            Stale,
            "its own write"
        );
        assert_eq!(auth.apply_agent_credential("m1", &h1, 6), Unchanged);
        assert!(
            !watching.is_revoked(),
            "the same credential again ends nothing"
        );
        assert_eq!(auth.apply_agent_removal("m1", 4, true), Stale);
        assert!(auth.authenticate(&t1).is_some());
        assert_eq!(auth.apply_agent_credential("m1", &h2, 8), Accepted);
        assert!(
            watching.is_revoked(),
            "a changed hash revokes the former credential"
        );
        assert_eq!(auth.apply_agent_removal("m1", 9, true), Revoked);
        assert!(auth.authenticate(&t2).is_none());
        assert_eq!(auth.apply_agent_credential("m1", &h0, 12), Accepted);
    }

    /// A credential revoked here, ahead of the store, stays revoked while the feed still
    /// delivers the changes from before its Secret's deletion; a new registration's credential
    /// is accepted meanwhile.
    #[test]
    fn a_local_revocation_is_not_undone_by_late_events() {
        use CredentialChange::*;
        let (auth, [t1, t2, t3], [h1, h2, h3]) = three_tokens();
        assert_eq!(auth.apply_agent_credential("m1", &h1, 5), Accepted);
        assert!(auth.revoke_agent_credential("m1"));
        assert_eq!(auth.apply_agent_credential("m1", &h1, 7), Stale);
        assert!(auth.authenticate(&t1).is_none());
        assert_eq!(auth.apply_agent_credential("m1", &h2, 8), Accepted);
        assert!(auth.authenticate(&t2).is_some());

        // A deletion whose revision is known (the server deleted the Secret itself).
        assert!(auth.revoke_agent_credential("m1"));
        assert_eq!(auth.apply_agent_removal("m1", 10, false), Unchanged);
        assert_eq!(auth.apply_agent_credential("m1", &h2, 9), Stale);
        assert_eq!(auth.apply_agent_removal("m1", 10, true), Unchanged);
        assert_eq!(auth.apply_agent_credential("m1", &h3, 12), Accepted);
        assert!(auth.authenticate(&t3).is_some());
    }

    /// A fresh list replaces what the feed knew, except what this server knows at a later
    /// revision than the list's.
    #[test]
    fn a_list_replaces_the_credentials_but_keeps_newer_knowledge() {
        use CredentialChange::*;
        let auth = Authenticator::new(generate_token(), generate_token());
        let tokens: Vec<String> = (0..6).map(|_| generate_token()).collect();
        let h = |i: usize| token_hash(&tokens[i]);
        auth.apply_agent_credential("kept", &h(0), 20);
        auth.apply_agent_credential("gone", &h(1), 8);
        auth.apply_agent_credential("changed", &h(2), 7);
        auth.apply_agent_credential("revoked", &h(5), 6);
        assert!(auth.revoke_agent_credential("revoked"));
        // Listed before the revoked credential's Secret was deleted.
        let listed = HashMap::from([
            ("changed".to_string(), h(3)),
            ("new".to_string(), h(4)),
            ("kept".to_string(), h(1)),
            ("revoked".to_string(), h(5)),
        ]);
        let mut changes = auth.replace_agent_credentials(&listed, 10);
        changes.sort();
        assert_eq!(
            changes,
            vec![
                ("changed".to_string(), Accepted),
                ("gone".to_string(), Revoked),
                ("new".to_string(), Accepted),
            ]
        );
        assert!(
            auth.authenticate(&tokens[0]).is_some(),
            "newer than the list"
        );
        assert_eq!(auth.agent_clusters(), ["changed", "kept", "new"]);
        assert!(auth.authenticate(&tokens[2]).is_none());
        assert!(auth.authenticate(&tokens[5]).is_none(), "still revoked");
    }

    /// An authenticator holding a credential of member `m1`, and that credential's revocation.
    fn watching_member() -> (Authenticator, Revocation) {
        let auth = Authenticator::new(generate_token(), generate_token());
        let token = generate_token();
        auth.set_agent_credential("m1", &token_hash(&token));
        let revocation = auth.credential(&token).unwrap().revocation.unwrap();
        (auth, revocation)
    }

    /// A watch body that never ends by itself, as an open watch with no events.
    fn open_watch(first: &'static str) -> Response {
        let lines = stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from(first))])
            .chain(stream::pending());
        Response::new(Body::from_stream(lines))
    }

    #[tokio::test]
    async fn a_revoked_credential_ends_its_watch_with_a_401_error_event() {
        let (auth, revocation) = watching_member();
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
        let (_auth, revocation) = watching_member();
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
