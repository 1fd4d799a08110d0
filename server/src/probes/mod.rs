//! The server's client of push members' HTTP surface: health probes (`/readyz`, falling back to
//! `/healthz` when the member answers 404, as docs/semantics.md §3.1 says), the cluster
//! summary (`/cluster`: version, API enablements, nodes, resources), and objects (`POST /apply`,
//! `GET`/`DELETE /objects?apiVersion=&kind=&namespace=&name=`). Controllers use it through the
//! [`MemberClient`] trait so that they are tested without HTTP.

use async_trait::async_trait;
use flotilla_api::json_pointer::JsonPointer;
use serde_json::Value;
use std::time::Duration;

/// What a probe of a push member found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// The member answered at all.
    pub online: bool,
    /// It answered 200.
    pub healthy: bool,
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
    async fn probe(&self, endpoint: &str) -> ProbeResult;
    /// Reads the cluster summary (kubernetesVersion, apiEnablements, nodeSummary,
    /// resourceSummary).
    async fn summary(&self, endpoint: &str) -> Result<Value, SummaryError>;
    /// Creates or updates an object; answers it as stored (with status).
    async fn apply(&self, endpoint: &str, manifest: &Value) -> Result<Value, MemberError>;
    /// Reads an object (`None` when absent).
    async fn get(
        &self,
        endpoint: &str,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError>;
    /// Deletes an object (absent is fine).
    async fn delete(&self, endpoint: &str, object: &MemberObject) -> Result<(), MemberError>;
}

/// [`MemberClient`] over HTTP(S).
#[derive(Clone, Debug)]
pub struct HttpMemberClient {
    client: reqwest::Client,
}

impl HttpMemberClient {
    /// A client whose every request times out after `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()?,
        })
    }
}

fn join(endpoint: &str, path: &str) -> String {
    format!("{}{path}", endpoint.trim_end_matches('/'))
}

#[async_trait]
impl MemberClient for HttpMemberClient {
    async fn probe(&self, endpoint: &str) -> ProbeResult {
        let mut status = self
            .client
            .get(join(endpoint, "/readyz"))
            .send()
            .await
            .map(|r| r.status());
        if matches!(status, Ok(s) if s == reqwest::StatusCode::NOT_FOUND) {
            status = self
                .client
                .get(join(endpoint, "/healthz"))
                .send()
                .await
                .map(|r| r.status());
        }
        match status {
            Err(_) => ProbeResult {
                online: false,
                healthy: false,
            },
            Ok(s) => ProbeResult {
                online: true,
                healthy: s == reqwest::StatusCode::OK,
            },
        }
    }

    async fn summary(&self, endpoint: &str) -> Result<Value, SummaryError> {
        let err = |message: String| SummaryError {
            endpoint: endpoint.to_string(),
            message,
        };
        let resp = self
            .client
            .get(join(endpoint, "/cluster"))
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(err(format!("answered {}", resp.status())));
        }
        resp.json().await.map_err(|e| err(e.to_string()))
    }

    async fn apply(&self, endpoint: &str, manifest: &Value) -> Result<Value, MemberError> {
        let err = |message: String| MemberError {
            operation: "apply",
            endpoint: endpoint.to_string(),
            message,
        };
        let resp = self
            .client
            .post(join(endpoint, "/apply"))
            .json(manifest)
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        let status = resp.status();
        let body: Value = resp.json().await.map_err(|e| err(e.to_string()))?;
        if !status.is_success() {
            return Err(err(format!("answered {status}: {body}")));
        }
        Ok(body)
    }

    async fn get(
        &self,
        endpoint: &str,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError> {
        let err = |message: String| MemberError {
            operation: "get",
            endpoint: endpoint.to_string(),
            message,
        };
        let resp = self
            .client
            .get(join(endpoint, "/objects"))
            .query(&object_query(object))
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        match resp.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => resp.json().await.map(Some).map_err(|e| err(e.to_string())),
            s => Err(err(format!("answered {s}"))),
        }
    }

    async fn delete(&self, endpoint: &str, object: &MemberObject) -> Result<(), MemberError> {
        let err = |message: String| MemberError {
            operation: "delete",
            endpoint: endpoint.to_string(),
            message,
        };
        let resp = self
            .client
            .delete(join(endpoint, "/objects"))
            .query(&object_query(object))
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        match resp.status() {
            s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
            s => Err(err(format!("answered {s}"))),
        }
    }
}

fn object_query(o: &MemberObject) -> [(&'static str, &str); 4] {
    [
        ("apiVersion", &o.api_version),
        ("kind", &o.kind),
        ("namespace", &o.namespace),
        ("name", &o.name),
    ]
}
