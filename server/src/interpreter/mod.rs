//! The resource interpreter: what Flotilla knows about the *inside* of a resource template.
//!
//! Templates are unstructured (`serde_json::Value`). [`native`] holds the rules for
//! Kubernetes' own kinds (replicas and requirements, revision, status reflection, health,
//! status aggregation, dependencies); [`jsonpath`] evaluates the Kubernetes JSONPath
//! templates of `statePreservation` rules; [`lua`] is the sandbox Lua customizations run in.

pub mod jsonpath;
pub mod lua;
pub mod native;

use std::fmt;

use flotilla_api::selector::LabelSelector;
use flotilla_api::work::ResourceHealth;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use lua::{SandboxLimits, ScriptError};
pub use native::{FieldError, WellKnownKind};

/// `apiVersion` + `kind`: what interpreter rules are keyed by (exactly, as Karmada: a rule for
/// `apps/v1 Deployment` does not apply to `apps/v1beta1 Deployment`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gvk {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// CamelCase kind.
    pub kind: String,
}

impl Gvk {
    /// A GVK from its two strings.
    pub fn new(api_version: &str, kind: &str) -> Self {
        Gvk {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// The GVK an object says it is; `None` when `apiVersion` or `kind` is missing or empty.
    pub fn of(object: &Value) -> Option<Gvk> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        (!api_version.is_empty() && !kind.is_empty()).then(|| Gvk::new(api_version, kind))
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// Health of one member object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// Healthy (also the verdict for kinds without a health rule, as Karmada's work status).
    Healthy,
    /// The rule says it is not healthy.
    Unhealthy,
    /// The rule could not decide (script error, timeout, malformed object).
    Unknown,
}

impl From<Health> for ResourceHealth {
    fn from(health: Health) -> Self {
        match health {
            Health::Healthy => ResourceHealth::Healthy,
            Health::Unhealthy => ResourceHealth::Unhealthy,
            Health::Unknown => ResourceHealth::Unknown,
        }
    }
}

/// An object a template depends on (Karmada's `DependentObjectReference`): by name, or, when
/// `name` is empty, every object of that kind in the namespace matching `labelSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRef {
    /// apiVersion of the dependency.
    pub api_version: String,
    /// Kind of the dependency.
    pub kind: String,
    /// Namespace (the template's).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name; empty when selected by labels.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Label selector, when not named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

impl ObjectRef {
    /// A named dependency.
    pub fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            label_selector: None,
        }
    }
}

/// The interpreter operations, named as Karmada's `InterpreterOperation`s; each has one Lua
/// entry function and one field in a customization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// `replicaResource` / `GetReplicas(desiredObj) return replica, requires`.
    InterpretReplica,
    /// `replicaRevision` / `ReviseReplica(obj, desiredReplica) return obj`.
    ReviseReplica,
    /// `retention` / `Retain(desiredObj, observedObj) return desiredObj`.
    Retain,
    /// `statusAggregation` / `AggregateStatus(desiredObj, statusItems) return desiredObj`.
    AggregateStatus,
    /// `statusReflection` / `ReflectStatus(observedObj) return status`.
    InterpretStatus,
    /// `healthInterpretation` / `InterpretHealth(observedObj) return bool`.
    InterpretHealth,
    /// `dependencyInterpretation` / `GetDependencies(desiredObj) return dependencies`.
    InterpretDependency,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 7] = [
        Operation::InterpretReplica,
        Operation::ReviseReplica,
        Operation::Retain,
        Operation::AggregateStatus,
        Operation::InterpretStatus,
        Operation::InterpretHealth,
        Operation::InterpretDependency,
    ];

    /// The Lua function a script for this operation must define.
    pub fn lua_function(self) -> &'static str {
        match self {
            Operation::InterpretReplica => "GetReplicas",
            Operation::ReviseReplica => "ReviseReplica",
            Operation::Retain => "Retain",
            Operation::AggregateStatus => "AggregateStatus",
            Operation::InterpretStatus => "ReflectStatus",
            Operation::InterpretHealth => "InterpretHealth",
            Operation::InterpretDependency => "GetDependencies",
        }
    }

    /// The field of `spec.customizations` holding the script.
    pub fn customization_field(self) -> &'static str {
        match self {
            Operation::InterpretReplica => "replicaResource",
            Operation::ReviseReplica => "replicaRevision",
            Operation::Retain => "retention",
            Operation::AggregateStatus => "statusAggregation",
            Operation::InterpretStatus => "statusReflection",
            Operation::InterpretHealth => "healthInterpretation",
            Operation::InterpretDependency => "dependencyInterpretation",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.lua_function())
    }
}
