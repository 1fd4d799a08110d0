//! The client of push members that are Kubernetes API servers: the kube member runtime
//! ([`flotilla_member::kube`], the one a pull agent drives) driven from the control plane, so that push and pull
//! apply, read status and delete by the same rules (server-side apply, Karmada's ownership
//! marks and conflict rule, deleting only Flotilla's objects). One runtime per member, kept
//! while its endpoint and credential stay the same and built anew when either changes (a
//! rotated token). Health is `/readyz`, falling back to `/healthz` on 404; a refused
//! credential (401, 403) is reported as such, so the Cluster's Ready message says why.

use super::{MemberClient, MemberError, MemberObject, MemberTarget, ProbeResult, SummaryError};
use crate::probes::{KubeCredential, MemberAccess};
use async_trait::async_trait;
use flotilla_member::kube::connect::client_for_endpoint;
use flotilla_member::kube::health::{self, Probe};
use flotilla_member::kube::{KubeRuntime, KubeSettings};
use flotilla_member::{group_of, normalize_namespace, MemberRuntime, ObjectRef};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

/// One member's client and runtime, with the fingerprint of what they were built from.
struct Connection {
    fingerprint: u64,
    client: ::kube::Client,
    runtime: Arc<KubeRuntime>,
}

/// [`MemberClient`] for Kubernetes API servers.
pub struct KubeMemberClient {
    timeout: Duration,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
}

impl KubeMemberClient {
    /// A client whose probes time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        KubeMemberClient {
            timeout,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// The member's connection, built when missing or when its endpoint or credential changed.
    fn connection(&self, member: &MemberTarget) -> Result<Arc<Connection>, String> {
        let MemberAccess::Kube(credential) = &member.access else {
            return Err("not a Kubernetes API member".into());
        };
        let fingerprint = fingerprint(&member.endpoint, credential);
        if let Some(c) = self
            .connections
            .lock()
            .get(&member.cluster)
            .filter(|c| c.fingerprint == fingerprint)
        {
            return Ok(c.clone());
        }
        if !credential.proxy_url.is_empty() {
            tracing::warn!(cluster = %member.cluster,
                "spec.proxyURL is not supported for Kubernetes API members; connecting directly");
        }
        let client = client_for_endpoint(
            &member.endpoint,
            &credential.token,
            credential.ca_bundle.as_deref(),
            credential.insecure_skip_tls_verification,
        )
        .map_err(|e| flotilla_support::error_chain(&e))?;
        let settings = KubeSettings {
            cluster: member.cluster.clone(),
            ..KubeSettings::default()
        };
        let runtime = KubeRuntime::new(client.clone(), settings)
            .map_err(|e| flotilla_support::error_chain(&e))?;
        let runtime = Arc::new(runtime);
        let connection = Arc::new(Connection {
            fingerprint,
            client,
            runtime,
        });
        self.connections
            .lock()
            .insert(member.cluster.clone(), connection.clone());
        Ok(connection)
    }
}

fn fingerprint(endpoint: &str, credential: &KubeCredential) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    endpoint.hash(&mut h);
    credential.hash(&mut h);
    h.finish()
}

/// What a probe's answer means for the Cluster's Ready condition.
pub fn probe_result(probe: &Probe, healthy: bool) -> ProbeResult {
    match probe {
        _ if healthy => ProbeResult::answered(true),
        Probe::Answered(code @ (401 | 403)) => ProbeResult {
            online: true,
            healthy: false,
            problem: Some(format!(
                "the member's API server refused the credential of spec.secretRef ({}): \
                 renew the token in that Secret",
                health::describe(&Probe::Answered(*code))
            )),
        },
        Probe::Answered(_) => ProbeResult::answered(false),
        Probe::Offline(why) => ProbeResult {
            online: false,
            healthy: false,
            problem: Some(format!("cluster is not reachable: {why}")),
        },
    }
}

fn object_ref(o: &MemberObject) -> ObjectRef {
    ObjectRef::new(
        &o.api_version,
        &o.kind,
        &normalize_namespace(group_of(&o.api_version), &o.kind, &o.namespace),
        &o.name,
    )
}

#[async_trait]
impl MemberClient for KubeMemberClient {
    async fn probe(&self, member: &MemberTarget) -> ProbeResult {
        let connection = match self.connection(member) {
            Ok(c) => c,
            Err(problem) => {
                return ProbeResult {
                    online: false,
                    healthy: false,
                    problem: Some(format!("cannot reach the member's API server: {problem}")),
                }
            }
        };
        let (healthy, probe) = health::check(&connection.client, self.timeout).await;
        probe_result(&probe, healthy)
    }

    async fn summary(&self, member: &MemberTarget) -> Result<Value, SummaryError> {
        let err = |message: String| SummaryError {
            endpoint: member.endpoint.clone(),
            message,
        };
        let connection = self.connection(member).map_err(err)?;
        let summary = connection
            .runtime
            .summary()
            .await
            .map_err(|e| err(flotilla_support::error_chain(&e)))?;
        serde_json::to_value(summary).map_err(|e| err(e.to_string()))
    }

    async fn apply(&self, member: &MemberTarget, manifest: &Value) -> Result<Value, MemberError> {
        let err = |message: String| MemberError {
            operation: "apply",
            endpoint: member.endpoint.clone(),
            message,
        };
        let connection = self.connection(member).map_err(err)?;
        connection
            .runtime
            .apply(manifest.clone())
            .await
            .map_err(|e| err(flotilla_support::error_chain(&e)))
    }

    async fn get(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<Option<Value>, MemberError> {
        let err = |message: String| MemberError {
            operation: "get",
            endpoint: member.endpoint.clone(),
            message,
        };
        let connection = self.connection(member).map_err(err)?;
        connection
            .runtime
            .get(&object_ref(object))
            .await
            .map_err(|e| err(flotilla_support::error_chain(&e)))
    }

    async fn delete(
        &self,
        member: &MemberTarget,
        object: &MemberObject,
    ) -> Result<(), MemberError> {
        let err = |message: String| MemberError {
            operation: "delete",
            endpoint: member.endpoint.clone(),
            message,
        };
        let connection = self.connection(member).map_err(err)?;
        connection
            .runtime
            .delete(&object_ref(object))
            .await
            .map(|_| ())
            .map_err(|e| err(flotilla_support::error_chain(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_answers_become_ready_messages() {
        let cases = [
            (Probe::Answered(200), true, (true, true, None)),
            (Probe::Answered(500), false, (true, false, None)),
            (
                Probe::Answered(401),
                false,
                (true, false, Some("refused the credential")),
            ),
            (
                Probe::Answered(403),
                false,
                (true, false, Some("403 Forbidden")),
            ),
            (
                Probe::Offline("connection refused".into()),
                false,
                (false, false, Some("not reachable: connection refused")),
            ),
        ];
        for (probe, healthy, (online, want_healthy, problem)) in cases {
            let got = probe_result(&probe, healthy);
            assert_eq!(
                (got.online, got.healthy),
                (online, want_healthy),
                "{probe:?}"
            );
            match (problem, &got.problem) {
                (None, None) => {}
                (Some(needle), Some(p)) => assert!(p.contains(needle), "{probe:?}: {p}"),
                (want, got) => panic!("{probe:?}: want {want:?}, got {got:?}"),
            }
        }
    }
}
