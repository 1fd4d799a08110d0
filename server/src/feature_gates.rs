//! `--feature-gates`: Karmada's switches that Flotilla honours, written as Karmada writes them
//! (`Failover=true,GracefulEviction=false`). Flotilla's defaults follow its failover guide:
//! both on. A gate Flotilla does not know is an error, so a typo never silently does nothing.

use std::collections::BTreeMap;

/// The gates Flotilla reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// `Failover`: the taint manager evicts from clusters with NoExecute taints.
    pub failover: bool,
    /// `GracefulEviction`: an evicted cluster keeps its copy under an eviction task until the new
    /// placement is healthy; off, the cluster is removed from the placement at once.
    pub graceful_eviction: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            failover: true,
            graceful_eviction: true,
        }
    }
}

/// Why `--feature-gates` was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// Not `Name=true|false`.
    #[error("feature gate {0:?}: expected Name=true or Name=false")]
    Malformed(String),
    /// A gate Flotilla does not have.
    #[error("unknown feature gate {0:?}: Flotilla knows Failover and GracefulEviction")]
    Unknown(String),
}

impl std::str::FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut set = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| FeatureGateError::Malformed(part.to_string()))?;
            let on = match value.trim() {
                "true" => true,
                "false" => false,
                _ => return Err(FeatureGateError::Malformed(part.to_string())),
            };
            set.insert(name.trim().to_string(), on);
        }
        let mut gates = FeatureGates::default();
        for (name, on) in set {
            match name.as_str() {
                "Failover" => gates.failover = on,
                "GracefulEviction" => gates.graceful_eviction = on,
                _ => return Err(FeatureGateError::Unknown(name)),
            }
        }
        Ok(gates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_as_karmada_writes_them() {
        let on = FeatureGates::default();
        let table: [(&str, Result<FeatureGates, FeatureGateError>); 6] = [
            ("", Ok(on)),
            (
                "Failover=false",
                Ok(FeatureGates {
                    failover: false,
                    ..on
                }),
            ),
            (
                "Failover=true, GracefulEviction=false",
                Ok(FeatureGates {
                    graceful_eviction: false,
                    ..on
                }),
            ),
            (
                "Failover",
                Err(FeatureGateError::Malformed("Failover".into())),
            ),
            (
                "Failover=yes",
                Err(FeatureGateError::Malformed("Failover=yes".into())),
            ),
            (
                "PropagateDeps=true",
                Err(FeatureGateError::Unknown("PropagateDeps".into())),
            ),
        ];
        for (input, want) in table {
            assert_eq!(input.parse::<FeatureGates>(), want, "{input}");
        }
    }
}
