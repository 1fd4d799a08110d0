//! The server's client of push members: health probes (`/readyz`, falling back to `/healthz`
//! when the member answers 404, as docs/semantics.md §3.1 says), the cluster summary (version,
//! API enablements, nodes, resources), and objects (apply, get, delete). Controllers use it
//! through the [`MemberClient`] trait so that they are tested without HTTP.
//!
//! A push member is one of two things ([`MemberAccess`]): a Kubernetes API server, reached
//! with the token and CA bundle of the Cluster's `spec.secretRef` ([`kube`], sharing the pull
//! agent's kube runtime), or the member HTTP surface of `flotilla-agent --mode push`, a
//! simulated member ([`surface`]). [`MemberClients`] sends each call to the right one.

pub mod kube;
pub mod surface;
pub mod target;

pub use surface::HttpMemberClient;
pub use target::{KubeCredential, MemberAccess, MemberTarget};

use async_trait::async_trait;
use flotilla_api::json_pointer::JsonPointer;
use serde_json::Value;

/// What a probe of a push member found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeResult {
    /// The member answered at all.
    pub online: bool,
    /// It answered 200.
    pub healthy: bool,
    /// Why it is not healthy, when the probe knows better than "no answer" or "not ok" (a
    /// refused credential, an unreadable Secret): the Ready condition's message.
    pub problem: Option<String>,
}

impl ProbeResult {
    /// A member that answered (`healthy` when with 200).
    pub fn answered(healthy: bool) -> Self {
        ProbeResult {
            online: true,
            healthy,
            problem: None,
        }
    }

    /// A member that did not answer.
    pub fn unreachable() -> Self {
        ProbeResult::default()
    }
}

/// Why the member's summary could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the member's cluster summary from {endpoint}: {message}")]
pub struct SummaryError {
    /// The member endpoint.
    pub endpoint: String,
    /// What went wrong.
    pub message: String,
}

/// A failed object call to a member.
#[derive(Debug, thiserror::Error)]
#[error("{operation} on member {endpoint} failed: {message}")]
pub struct MemberError {
    /// What was attempted.
    pub operation: &'static str,
    /// The member endpoint.
    pub endpoint: String,
    /// What went wrong.
    pub message: String,
}

/// Names one object on a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObject {
    /// apiVersion.
    pub api_version: String,
    /// kind.
    pub kind: String,
    /// namespace (empty for cluster-scoped).
    pub namespace: String,
    /// name.
    pub name: String,
}

impl MemberObject {
    /// The identity of a manifest.
    pub fn of(manifest: &Value) -> Self {
        let s = |p: &str| {
            manifest
                .lookup(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        MemberObject {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
        }
    }
}

/// What the server asks of a push member.
#[async_trait]
pub trait MemberClient: Send + Sync + 'static {
    /// Probes health.
    async fn probe(&self, member: &MemberTarget) -> ProbeResult;
    /// Reads the cluster summary (kubernetesVersion, apiEnablements, nodeSummary,
    /// resourceSummary).
    async fn summary(&self, member: &MemberTarget) -> Result<Value, SummaryError>;
    /// Creates or updates an object; answers it as stored (with status).
    async fn apply(&self, member: &MemberTarget, manifest: &Value) -> Result<Value, MemberError>;
    /// Reads an object (`None` when absent).
    async fn get(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError>;
    /// Deletes an object (absent is fine).
    async fn delete(&self, member: &MemberTarget, object: &MemberObject)
        -> Result<(), MemberError>;
}

/// Sends each call to the client of the member's kind: the Kubernetes API client for members
/// with credentials, the member-surface client for simulated ones. A member whose credential
/// could not be read fails every call with that reason.
pub struct MemberClients {
    /// Flotilla's member HTTP surface.
    pub surface: HttpMemberClient,
    /// Kubernetes API servers.
    pub kube: kube::KubeMemberClient,
}

impl MemberClients {
    /// The client of `member`'s kind, for the object calls; a broken member fails `operation`
    /// with the reason its credential could not be read.
    fn client_for(
        &self,
        operation: &'static str,
        member: &MemberTarget,
    ) -> Result<&dyn MemberClient, MemberError> {
        match &member.access {
            MemberAccess::Surface => Ok(&self.surface),
            MemberAccess::Kube(_) => Ok(&self.kube),
            MemberAccess::Broken(problem) => Err(broken(operation, member, problem)),
        }
    }
}

#[async_trait]
impl MemberClient for MemberClients {
    async fn probe(&self, member: &MemberTarget) -> ProbeResult {
        match &member.access {
            MemberAccess::Surface => self.surface.probe(member).await,
            MemberAccess::Kube(_) => self.kube.probe(member).await,
            MemberAccess::Broken(problem) => ProbeResult {
                online: false,
                healthy: false,
                problem: Some(problem.clone()),
            },
        }
    }

    async fn summary(&self, member: &MemberTarget) -> Result<Value, SummaryError> {
        match &member.access {
            MemberAccess::Surface => self.surface.summary(member).await,
            MemberAccess::Kube(_) => self.kube.summary(member).await,
            MemberAccess::Broken(problem) => Err(SummaryError {
                endpoint: member.endpoint.clone(),
                message: problem.clone(),
            }),
        }
    }

    async fn apply(&self, member: &MemberTarget, manifest: &Value) -> Result<Value, MemberError> {
        self.client_for("apply", member)?
            .apply(member, manifest)
            .await
    }

    async fn get(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError> {
        self.client_for("get", member)?.get(member, object).await
    }

    async fn delete(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<(), MemberError> {
        self.client_for("delete", member)?
            .delete(member, object)
            .await
    }
}

fn broken(operation: &'static str, member: &MemberTarget, problem: &str) -> MemberError {
    MemberError {
        operation,
        endpoint: member.endpoint.clone(),
        message: problem.to_string(),
    }
}
