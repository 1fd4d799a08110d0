//! `config.karmada.io/v1alpha1 ResourceInterpreterCustomization` (cluster-scoped): a user's Lua
//! rules for one target kind, with Karmada's field names. Only the declarative (Lua) form is
//! read; the interpreter compiles the scripts ([`super::Interpreter::add_customization`]).

use std::collections::BTreeMap;

use flotilla_api::meta::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::Operation;

/// `apiVersion` of ResourceInterpreterCustomization.
pub const CUSTOMIZATION_API_VERSION: &str = "config.karmada.io/v1alpha1";
/// `kind` of ResourceInterpreterCustomization.
pub const CUSTOMIZATION_KIND: &str = "ResourceInterpreterCustomization";

/// A ResourceInterpreterCustomization.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceInterpreterCustomization {
    /// `config.karmada.io/v1alpha1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `ResourceInterpreterCustomization`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata; the name identifies the customization.
    pub metadata: ObjectMeta,
    /// The target and its rules.
    pub spec: ResourceInterpreterCustomizationSpec,
}

/// `spec` of a ResourceInterpreterCustomization.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceInterpreterCustomizationSpec {
    /// The kind the rules are for.
    pub target: CustomizationTarget,
    /// The rules.
    pub customizations: CustomizationRules,
}

/// `spec.target`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CustomizationTarget {
    /// apiVersion of the target kind (`flink.apache.org/v1beta1`).
    pub api_version: String,
    /// The target kind (`FlinkDeployment`).
    pub kind: String,
}

/// `spec.customizations`: one optional Lua script per operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CustomizationRules {
    /// `function Retain(desiredObj, observedObj) return desiredObj end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<LuaScript>,
    /// `function GetReplicas(desiredObj) return replica, requires end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_resource: Option<LuaScript>,
    /// `function ReviseReplica(obj, desiredReplica) return obj end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_revision: Option<LuaScript>,
    /// `function ReflectStatus(observedObj) return status end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reflection: Option<LuaScript>,
    /// `function AggregateStatus(desiredObj, statusItems) return desiredObj end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_aggregation: Option<LuaScript>,
    /// `function InterpretHealth(observedObj) return healthy end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_interpretation: Option<LuaScript>,
    /// `function GetDependencies(desiredObj) return dependencies end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dependency_interpretation: Option<LuaScript>,
}

/// A rule written in Lua.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LuaScript {
    /// The script's source.
    pub lua_script: String,
}

impl CustomizationRules {
    /// The script of one operation, if set.
    pub fn script(&self, operation: Operation) -> Option<&str> {
        let rule = match operation {
            Operation::InterpretReplica => &self.replica_resource,
            Operation::ReviseReplica => &self.replica_revision,
            Operation::Retain => &self.retention,
            Operation::AggregateStatus => &self.status_aggregation,
            Operation::InterpretStatus => &self.status_reflection,
            Operation::InterpretHealth => &self.health_interpretation,
            Operation::InterpretDependency => &self.dependency_interpretation,
        };
        rule.as_ref().map(|r| r.lua_script.as_str())
    }

    /// Every script that is set, by operation.
    pub fn scripts(&self) -> BTreeMap<Operation, String> {
        Operation::ALL
            .into_iter()
            .filter_map(|op| self.script(op).map(|s| (op, s.to_string())))
            .collect()
    }
}
