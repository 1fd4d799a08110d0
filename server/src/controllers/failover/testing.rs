//! What the failover controllers' tests share: the binding their controller tests store, the
//! health reports they feed the deciders, and the checks of what an eviction wrote.

use crate::controllers::failover::history::HistoryStep;
use crate::store::Store;
use flotilla_api::binding::{AggregatedStatusItem, ResourceBindingStatus};
use flotilla_api::history::FailoverHistoryItem;
use flotilla_api::work::ResourceHealth;
use serde_json::Value;
use std::sync::Arc;

/// The ResourceBinding `default/nginx-deployment` the controller tests store, as it is now.
///
/// # Panics
/// If the store does not have it.
pub async fn nginx_binding(store: &Arc<dyn Store>) -> Value {
    crate::controllers::runtime::testing::nginx_binding(store)
        .await
        .expect("the binding default/nginx-deployment is stored")
}

/// A binding status whose aggregated status reports each `(cluster, health)`, applied.
pub fn health_status(health: &[(&str, ResourceHealth)]) -> ResourceBindingStatus {
    ResourceBindingStatus {
        aggregated_status: health
            .iter()
            .map(|(c, h)| AggregatedStatusItem {
                cluster_name: (*c).into(),
                applied: true,
                health: Some(*h),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Asserts the placement a written binding carries: `clusters` as its `spec.clusters` and
/// `tasks` graceful eviction tasks.
///
/// # Panics
/// If either differs (the message names `what`).
pub fn assert_placement(binding: &Value, clusters: Value, tasks: usize, what: &str) {
    assert_eq!(binding["spec"]["clusters"], clusters, "{what}");
    assert_eq!(
        binding["spec"]["gracefulEvictionTasks"]
            .as_array()
            .map(Vec::len),
        Some(tasks),
        "{what}"
    );
}

/// The one entry a write's history steps open.
///
/// # Panics
/// If the steps are anything but one opening (the message names `what`).
pub fn one_opened<'a>(history: &'a [HistoryStep], what: &str) -> &'a FailoverHistoryItem {
    let [HistoryStep::Open(entry)] = history else {
        panic!("{what}: one entry opens: {history:?}");
    };
    entry
}

/// The Events of `events` with `reason`.
pub fn with_reason<'a>(events: &'a [Value], reason: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["reason"] == reason).collect()
}

/// Whether `events` hold Karmada's Normal `EvictWorkloadFromClusterSucceed` naming `cluster`.
pub fn eviction_succeeded_event(events: &[Value], cluster: &str) -> bool {
    events.iter().any(|e| {
        e["reason"] == "EvictWorkloadFromClusterSucceed"
            && e["type"] == "Normal"
            && e["message"].as_str().unwrap_or("").contains(cluster)
    })
}
