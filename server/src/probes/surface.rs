//! The client of Flotilla's member HTTP surface (`flotilla-agent --mode push`, a simulated
//! member): `/readyz` and `/healthz`, the cluster summary at `/cluster`, and objects (`POST
//! /apply`, `GET`/`DELETE /objects?apiVersion=&kind=&namespace=&name=`).

use super::{MemberClient, MemberError, MemberObject, MemberTarget, ProbeResult, SummaryError};
use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

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
    async fn probe(&self, member: &MemberTarget) -> ProbeResult {
        let endpoint = member.endpoint.as_str();
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
            Err(_) => ProbeResult::unreachable(),
            Ok(s) => ProbeResult::answered(s == reqwest::StatusCode::OK),
        }
    }

    async fn summary(&self, member: &MemberTarget) -> Result<Value, SummaryError> {
        let endpoint = member.endpoint.as_str();
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

    async fn apply(&self, member: &MemberTarget, manifest: &Value) -> Result<Value, MemberError> {
        let endpoint = member.endpoint.as_str();
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
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError> {
        let endpoint = member.endpoint.as_str();
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

    async fn delete(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<(), MemberError> {
        let endpoint = member.endpoint.as_str();
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
