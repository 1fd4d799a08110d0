//! Failover behaviour of a policy (`spec.failover`): what happens to a workload when its
//! application turns unhealthy on a cluster or the cluster itself fails, and how the old copy
//! is purged. Both purge-mode spellings (the guide's `Immediately`/`Graciously` and Karmada
//! v1.15+'s `Directly`/`Gracefully`) are accepted and kept as written.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How the copy on the cluster a workload leaves is removed. Each spelling is kept as written;
/// use [`PurgeMode::is_immediate`] and [`PurgeMode::is_graceful`] to decide behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PurgeMode {
    /// Remove the old copy first (guide spelling).
    Immediately,
    /// Remove the old copy first (Karmada v1.15+ spelling).
    Directly,
    /// Keep the old copy until the new placement is healthy or the grace period ends (guide
    /// spelling, Flotilla's default).
    Graciously,
    /// As `Graciously` (Karmada v1.15+ spelling).
    Gracefully,
    /// Keep the old copy until a human lifts `suppressDeletion` or removes the task.
    Never,
}

impl PurgeMode {
    /// `Immediately` or `Directly`.
    pub fn is_immediate(&self) -> bool {
        matches!(self, PurgeMode::Immediately | PurgeMode::Directly)
    }

    /// `Graciously` or `Gracefully`.
    pub fn is_graceful(&self) -> bool {
        matches!(self, PurgeMode::Graciously | PurgeMode::Gracefully)
    }

    /// `Never`.
    pub fn is_never(&self) -> bool {
        matches!(self, PurgeMode::Never)
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            PurgeMode::Immediately => "Immediately",
            PurgeMode::Directly => "Directly",
            PurgeMode::Graciously => "Graciously",
            PurgeMode::Gracefully => "Gracefully",
            PurgeMode::Never => "Never",
        }
    }
}

impl fmt::Display for PurgeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.failover`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailoverBehavior {
    /// Application failover; `None` disables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailoverBehavior>,
    /// Cluster failover settings for this policy; `None` uses the server-wide defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFailoverBehavior>,
}

/// `spec.failover.application`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplicationFailoverBehavior {
    /// When an unhealthy application is failed over.
    pub decision_conditions: DecisionConditions,
    /// What happens to the old copy (default `Graciously`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// How long the old copy is kept at most (graceful modes only; default 600).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// State carried to the new cluster as labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

/// `decisionConditions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DecisionConditions {
    /// How long the application must stay unhealthy (default 300; 0 = at once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i32>,
}

/// `spec.failover.cluster`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterFailoverBehavior {
    /// What happens to the old copy (default `Graciously`; `Never` keeps it with
    /// `suppressDeletion`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// Overrides the server-wide graceful eviction timeout for this policy's tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// State carried to the new cluster as labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
    /// Flotilla extension: agent self-fencing for exactly-once placement (docs/failover.md,
    /// "Safety: self-fencing"). Karmada ignores it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing: Option<Fencing>,
    /// Flotilla extension: move the workload back to a cluster it was failed over from once
    /// that cluster has stayed Ready for a while (docs/failover.md, "Failback"). Absent: never
    /// (Karmada's behaviour). Karmada ignores it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failback: Option<Failback>,
}

/// `spec.failover.cluster.failback` (a Flotilla extension).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Failback {
    /// How long a recovered cluster must stay Ready, without a break, before the workload
    /// moves back to it (default [`DEFAULT_FAILBACK_STABILIZATION_SECONDS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stabilization_seconds: Option<i32>,
}

/// The stabilization window of a failback that names none.
pub const DEFAULT_FAILBACK_STABILIZATION_SECONDS: i32 = 300;

impl Failback {
    /// The window in seconds (the default when absent).
    pub fn stabilization_seconds(&self) -> i32 {
        self.stabilization_seconds
            .unwrap_or(DEFAULT_FAILBACK_STABILIZATION_SECONDS)
    }
}

/// `spec.failover.cluster.fencing` (a Flotilla extension).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Fencing {
    /// The workload must not run on two clusters at once across a cluster failover: a pull
    /// agent cut off from the server stops it after `--fence-after`, and the server does not
    /// dispatch the replacement before the old member's fence time.
    pub exactly_once: bool,
}

impl FailoverBehavior {
    /// Whether `cluster.fencing.exactlyOnce` is set.
    pub fn exactly_once(&self) -> bool {
        self.cluster
            .as_ref()
            .and_then(|c| c.fencing.as_ref())
            .is_some_and(|f| f.exactly_once)
    }

    /// `cluster.failback`, when the policy asks for it.
    pub fn failback(&self) -> Option<&Failback> {
        self.cluster.as_ref().and_then(|c| c.failback.as_ref())
    }
}

/// `statePreservation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatePreservation {
    /// One label per rule.
    pub rules: Vec<StatePreservationRule>,
}

/// One state-preservation rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatePreservationRule {
    /// Label key injected on the new cluster's manifest.
    pub alias_label_name: String,
    /// Kubernetes JSONPath evaluated on the workload's status (`{ .jobStatus.jobID }`).
    #[serde(rename = "jsonPath")]
    pub json_path: String,
}
