//! Built-in third-party customizations: Lua rules for popular custom kinds, shipped in the
//! binary (`include_str!`) and used when no user customization defines the same operation for
//! the same kind. Each file defines the entry functions of the operations it is registered
//! for, with Karmada's conventions.

use std::collections::BTreeMap;

use super::{Gvk, Operation};

/// One built-in customization.
pub struct BuiltIn {
    /// Name used in messages (`flink.apache.org/v1beta1/FlinkDeployment`).
    pub name: &'static str,
    /// The kind it interprets.
    pub target: Gvk,
    /// Its scripts by operation.
    pub scripts: BTreeMap<Operation, String>,
}

const FLINK_DEPLOYMENT: &str = include_str!("flinkdeployment.lua");

/// Every built-in customization.
pub fn builtins() -> Vec<BuiltIn> {
    vec![BuiltIn {
        name: "flink.apache.org/v1beta1/FlinkDeployment",
        target: Gvk::new("flink.apache.org/v1beta1", "FlinkDeployment"),
        scripts: [
            Operation::InterpretHealth,
            Operation::InterpretReplica,
            Operation::InterpretStatus,
            Operation::AggregateStatus,
            Operation::InterpretDependency,
        ]
        .into_iter()
        .map(|op| (op, FLINK_DEPLOYMENT.to_string()))
        .collect(),
    }]
}

#[cfg(test)]
mod tests;
