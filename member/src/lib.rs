//! `flotilla-member`: what a member cluster is to Flotilla. [`MemberRuntime`] is the one
//! interface the agent's pull loop, its member HTTP surface and the server's push-mode probes
//! use to apply, read and delete objects and to summarise the cluster (version, APIs, nodes,
//! resources, health). [`RuntimeFaults`] is the optional fault-injection side a runtime may
//! offer. [`sim`] is the embedded default, a kwok-like simulated cluster; [`kube`] is a real
//! member cluster reached through its Kubernetes API (kube-rs). [`hashing`] gives the
//! key-order-free content hashes the sim's revisions and the agent's applied record share.
//!
//! The agent (pull mode, CLI, registration) and the server (push mode) both depend on this
//! crate and never on each other.

pub mod hashing;
pub mod kube;
pub mod sim;

use flotilla_api::json_pointer::JsonPointer;
use std::fmt;

use async_trait::async_trait;
use flotilla_api::cluster::{ApiEnablement, NodeSummary, ResourceSummary};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

/// Identifies one object in a member: `apiVersion`, `kind`, `namespace` (empty for
/// cluster-scoped kinds) and `name`. Two references name the same object when group, kind,
/// namespace and name agree (see [`ObjectRef::same_object`]); the version is informative.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespace; empty for cluster-scoped kinds.
    #[serde(default)]
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// A reference from its parts.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// Reads the reference of a manifest: `apiVersion`, `kind` and `metadata.name` must be
    /// non-empty strings; the namespace is normalised with [`normalize_namespace`].
    pub fn from_manifest(manifest: &Value) -> Result<Self, RuntimeError> {
        if !manifest.is_object() {
            return Err(RuntimeError::Invalid(
                "a manifest must be a JSON object".into(),
            ));
        }
        let field = |pointer: &str, what: &str| -> Result<String, RuntimeError> {
            match manifest.lookup(pointer).and_then(Value::as_str) {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                _ => Err(RuntimeError::Invalid(format!("{what}: Required value"))),
            }
        };
        let api_version = field("/apiVersion", "apiVersion")?;
        let kind = field("/kind", "kind")?;
        let name = field("/metadata/name", "metadata.name")?;
        let namespace = manifest
            .lookup("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespace = normalize_namespace(group_of(&api_version), &kind, namespace);
        Ok(ObjectRef {
            api_version,
            kind,
            namespace,
            name,
        })
    }

    /// The API group (`""` for core).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// The API version without its group.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// Lower-case plural resource name (`deployments`).
    pub fn resource(&self) -> String {
        resource_plural(self.group(), &self.kind)
    }

    /// True when both name the same object (group, kind, namespace, name).
    pub fn same_object(&self, other: &ObjectRef) -> bool {
        self.group() == other.group()
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, " {}/{}", self.namespace, self.name)
        } else {
            write!(f, " {}", self.name)
        }
    }
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → `""`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The namespace an object of this kind lives in: empty for the cluster-scoped kinds Flotilla
/// knows, `default` when a namespaced (or unknown) kind names none.
pub fn normalize_namespace(group: &str, kind: &str, namespace: &str) -> String {
    let cluster_scoped = flotilla_api::kinds::builtin_by_kind(group, kind)
        .is_some_and(|rt| !rt.namespaced)
        || matches!(
            (group, kind),
            ("", "Node")
                | ("storage.k8s.io", "StorageClass")
                | ("rbac.authorization.k8s.io", "ClusterRole")
                | ("rbac.authorization.k8s.io", "ClusterRoleBinding")
        );
    if cluster_scoped {
        String::new()
    } else if namespace.is_empty() {
        "default".to_string()
    } else {
        namespace.to_string()
    }
}

/// The plural resource name of a kind: from Flotilla's kind table when known, else the
/// lower-case kind made plural by the usual English rules (`Policy` → `policies`).
pub fn resource_plural(group: &str, kind: &str) -> String {
    if let Some(rt) = flotilla_api::kinds::builtin_by_kind(group, kind) {
        return rt.plural;
    }
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// What a member runtime tells about its cluster, the material of a Cluster's status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSummary {
    /// e.g. `v1.32.0-sim`.
    pub kubernetes_version: String,
    /// Served APIs, sorted by group version then resource name.
    pub api_enablements: Vec<ApiEnablement>,
    /// Node counts.
    pub node_summary: NodeSummary,
    /// Allocatable, allocating and allocated resources.
    pub resource_summary: ResourceSummary,
    /// False when the member's API server reports itself unhealthy.
    pub healthy: bool,
}

/// Which objects to list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListFilter {
    /// Only this apiVersion's group (empty: any).
    pub api_version: String,
    /// Only this kind (empty: any).
    pub kind: String,
    /// Only this namespace (empty: any).
    pub namespace: String,
}

/// Failures of a runtime call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The manifest or request is malformed; the message names the field.
    #[error("invalid object: {0}")]
    Invalid(String),
    /// No such object.
    #[error("{0} not found")]
    NotFound(String),
    /// The runtime does not offer this operation.
    #[error("not supported by this runtime: {0}")]
    Unsupported(String),
    /// The runtime could not persist its state.
    #[error("persisting runtime state to {path}")]
    Persist {
        /// The state file.
        path: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The runtime's state file could not be read.
    #[error("reading runtime state from {path}")]
    Load {
        /// The state file.
        path: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The member holds an object of that name that is not Flotilla's to change or delete
    /// (not created by Flotilla, or by another Work); the message names the object and says
    /// how to take it over.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The member's API server refused the request or could not be reached.
    #[error("{operation}")]
    Api {
        /// What was asked, naming the object (e.g. `applying apps/v1 Deployment web/api`).
        operation: String,
        /// The answer or the transport failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// An object's `metadata.resourceVersion`.
pub fn resource_version_of(object: &Value) -> Option<String> {
    object
        .lookup("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A member cluster's object API and summary. Object-safe; shared as `Arc<dyn MemberRuntime>`.
#[async_trait]
pub trait MemberRuntime: Send + Sync {
    /// Creates or updates the object a manifest describes (keyed by group, kind, namespace,
    /// name) and answers the stored object, status included.
    async fn apply(&self, manifest: Value) -> Result<Value, RuntimeError>;
    /// The stored object, if any.
    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, RuntimeError>;
    /// Deletes the object (and what it owns); answers it as it was, if it existed.
    async fn delete(&self, object: &ObjectRef) -> Result<Option<Value>, RuntimeError>;
    /// Objects matching the filter, ordered by group, kind, namespace, name.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Value>, RuntimeError>;
    /// The object's `.status`, if the object exists and has one.
    async fn status(&self, object: &ObjectRef) -> Result<Option<Value>, RuntimeError> {
        Ok(self
            .get(object)
            .await?
            .and_then(|o| o.get("status").cloned())
            .filter(|s| !s.is_null()))
    }
    /// The object's `metadata.resourceVersion`, if it exists: it moves whenever the object
    /// or its status changes (what a Work's status is made from).
    async fn resource_version(&self, object: &ObjectRef) -> Result<Option<String>, RuntimeError> {
        Ok(self
            .get(object)
            .await?
            .as_ref()
            .and_then(resource_version_of))
    }
    /// Version, APIs, nodes, resources and health.
    async fn summary(&self) -> Result<ClusterSummary, RuntimeError>;
    /// A counter that moves whenever any object or status changes; subscribers wake up.
    fn subscribe(&self) -> watch::Receiver<u64>;
    /// Writes any unsaved state (called on shutdown).
    async fn flush(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// The runtime's fault-injection side, if it has one.
    fn faults(&self) -> Option<&dyn RuntimeFaults> {
        None
    }
}

/// A change of the member's node capacity (`POST /faults/capacity`). Absent fields keep
/// their current value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CapacityChange {
    /// Number of nodes.
    pub nodes: Option<usize>,
    /// Allocatable cpu per node.
    pub cpu: Option<flotilla_api::Quantity>,
    /// Allocatable memory per node.
    pub memory: Option<flotilla_api::Quantity>,
    /// Allocatable pods per node.
    pub pods: Option<flotilla_api::Quantity>,
}

/// Faults a runtime can be made to suffer (the sim's fault API).
#[async_trait]
pub trait RuntimeFaults: Send + Sync {
    /// Marks every node unschedulable (or schedulable again).
    async fn cordon(&self, enabled: bool) -> Result<(), RuntimeError>;
    /// Deletes the pods of a namespace (all namespaces when empty) matching a label selector
    /// (all pods when empty); answers how many went. Owned pods are recreated.
    async fn delete_pods(
        &self,
        namespace: &str,
        label_selector: &str,
    ) -> Result<usize, RuntimeError>;
    /// Changes node count and per-node allocatable; pods that no longer fit are evicted.
    async fn set_capacity(&self, change: CapacityChange) -> Result<(), RuntimeError>;
    /// Merges `status` (RFC 7386) into the object's status override, which then sticks;
    /// `null` clears the override. Answers the object.
    async fn set_status(&self, object: &ObjectRef, status: Value) -> Result<Value, RuntimeError>;
    /// The runtime's side of `GET /faults`.
    async fn describe(&self) -> Result<Value, RuntimeError>;
}

/// Waits until the flag turns true (or its sender is gone, which means the same: stop). The
/// stop signal of the sim's background ticker and of the agent's loops.
pub async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_from_manifests() {
        let cases = [
            (
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}}),
                Some(("apps", "v1", "default", "deployments")),
            ),
            (
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "x"}}),
                Some(("", "v1", "", "namespaces")),
            ),
            (
                json!({"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
                    "metadata": {"name": "f", "namespace": "jobs"}}),
                Some(("flink.apache.org", "v1beta1", "jobs", "flinkdeployments")),
            ),
            (
                json!({"apiVersion": "x.io/v1", "kind": "Policy", "metadata": {"name": "p"}}),
                Some(("x.io", "v1", "default", "policies")),
            ),
            (
                json!({"apiVersion": "x.io/v1", "kind": "Gateway", "metadata": {"name": "p"}}),
                Some(("x.io", "v1", "default", "gateways")),
            ),
            (
                json!({"apiVersion": "x.io/v1", "kind": "Box", "metadata": {"name": "p"}}),
                Some(("x.io", "v1", "default", "boxes")),
            ),
            (
                json!({"kind": "Deployment", "metadata": {"name": "a"}}),
                None,
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}),
                None,
            ),
            (json!([1, 2]), None),
        ];
        for (manifest, want) in cases {
            let got = ObjectRef::from_manifest(&manifest).ok();
            let got = got.as_ref().map(|r| {
                (
                    r.group().to_string(),
                    r.version().to_string(),
                    r.namespace.clone(),
                    r.resource(),
                )
            });
            let want = want
                .map(|(g, v, n, p)| (g.to_string(), v.to_string(), n.to_string(), p.to_string()));
            assert_eq!(got, want, "{manifest}");
        }
        let a = ObjectRef::new("apps/v1", "Deployment", "d", "x");
        let b = ObjectRef::new("apps/v1beta1", "Deployment", "d", "x");
        assert!(a.same_object(&b));
        assert_eq!(a.to_string(), "apps/v1 Deployment d/x");
    }
}
