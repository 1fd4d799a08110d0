//! The server's client of push members' HTTP surface: health probes (`/readyz`, falling back to
//! `/healthz` when the member answers 404, as karmada-semantics.md §3.1 says) and the cluster
//! summary (`/cluster`: version, API enablements, nodes, resources). Controllers use it through
//! the [`MemberClient`] trait so that they are tested without HTTP.

use crate::controllers::cluster_health::ProbeResult;
use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

/// Why the member's summary could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the member's cluster summary from {endpoint}: {message}")]
pub struct SummaryError {
    /// The member endpoint.
    pub endpoint: String,
    /// What went wrong.
    pub message: String,
}

/// What the server asks of a push member.
#[async_trait]
pub trait MemberClient: Send + Sync + 'static {
    /// Probes health.
    async fn probe(&self, endpoint: &str) -> ProbeResult;
    /// Reads the cluster summary (kubernetesVersion, apiEnablements, nodeSummary,
    /// resourceSummary).
    async fn summary(&self, endpoint: &str) -> Result<Value, SummaryError>;
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
}
