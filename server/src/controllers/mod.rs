//! Controllers: one module per decision, each a level-triggered `reconcile(key)` over a work
//! queue fed by store watches and a periodic resync (see [`runtime`]). Controllers talk to each
//! other only through the store. They live in wings: [`propagation`] (template to Works and
//! back), [`members`] (member health, taints, push delivery) and [`failover`] (evictions and
//! everything that makes them safe), beside the [`runtime`] that runs them and the helpers they
//! [`shared`]. Each controller module exports a `controller` function that builds its
//! [`Controller`] from one [`ControllerContext`]; [`CONTROLLERS`] lists them, and the server
//! starts them all through [`spawn`].

pub mod context;
pub mod failover;
pub mod members;
pub mod propagation;
pub mod runtime;
pub mod settings;
pub mod shared;
pub mod wiring;

pub use context::{ControllerContext, WiringError};
pub use runtime::controller::{
    object_key, spawn, split_key, Action, Controller, ControllerConfig, ControllerHandle,
    ControllerMetrics, ReconcileError, Reconciler, Source,
};
pub use settings::ControllerSettings;

use context::ControllerFn;

/// The part of the system a controller belongs to (its folder under `controllers/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wing {
    /// Member clusters: health, taints, push delivery.
    Members,
    /// A template on its way to the members and its status on the way back.
    Propagation,
    /// Evictions and what makes them safe.
    Failover,
}

/// One controller the server runs.
#[derive(Clone, Copy, Debug)]
pub struct ControllerEntry {
    /// Its name: the `controller` label of its metrics and the field of its logs.
    pub name: &'static str,
    /// Its wing.
    pub wing: Wing,
    /// What it decides, in one line.
    pub description: &'static str,
    /// Builds it from the context (see [`wiring`]).
    pub build: ControllerFn,
}

/// Every controller the server runs, by wing.
pub const CONTROLLERS: &[ControllerEntry] = &[
    ControllerEntry {
        name: "cluster-status",
        wing: Wing::Members,
        description: "each Cluster's Ready condition and summary, from probes of push members and the leases of pull members",
        build: wiring::cluster_status,
    },
    ControllerEntry {
        name: "cluster-taints",
        wing: Wing::Members,
        description: "the NoSchedule and NoExecute taints that follow from a Cluster's Ready condition",
        build: wiring::cluster_taints,
    },
    ControllerEntry {
        name: "cluster-taint-policy",
        wing: Wing::Members,
        description: "the taints ClusterTaintPolicies add to and remove from matching Clusters",
        build: wiring::cluster_taint_policy,
    },
    ControllerEntry {
        name: "cluster-removal",
        wing: Wing::Members,
        description: "keeps a deleted Cluster until its bindings left it and its Works are gone (its finalizer)",
        build: wiring::cluster_removal,
    },
    ControllerEntry {
        name: "push-execution",
        wing: Wing::Members,
        description: "applies Works to push members and reads their status back",
        build: wiring::push_execution,
    },
    ControllerEntry {
        name: "customizations",
        wing: Wing::Propagation,
        description: "loads ResourceInterpreterCustomizations into the interpreter",
        build: wiring::customizations,
    },
    ControllerEntry {
        name: "detector",
        wing: Wing::Propagation,
        description: "which policy claims a template, and its ResourceBinding",
        build: wiring::detector,
    },
    ControllerEntry {
        name: "dependencies-distributor",
        wing: Wing::Propagation,
        description: "attached bindings for the ConfigMaps, Secrets... a propagateDeps workload uses",
        build: wiring::dependencies_distributor,
    },
    ControllerEntry {
        name: "scheduler",
        wing: Wing::Propagation,
        description: "a binding's placement (spec.clusters) and its Scheduled condition",
        build: wiring::scheduler,
    },
    ControllerEntry {
        name: "binding-works",
        wing: Wing::Propagation,
        description: "one Work per target cluster of a binding; orphans removed once no task keeps them",
        build: wiring::binding_works,
    },
    ControllerEntry {
        name: "binding-status",
        wing: Wing::Propagation,
        description: "the Works' status aggregated into the binding and its template, and their health",
        build: wiring::binding_status,
    },
    ControllerEntry {
        name: "taint-manager",
        wing: Wing::Failover,
        description: "evicts a binding from a cluster whose NoExecute taints it does not tolerate",
        build: wiring::taint_manager,
    },
    ControllerEntry {
        name: "application-failover",
        wing: Wing::Failover,
        description: "evicts a workload that stays unhealthy on a Ready cluster",
        build: wiring::application_failover,
    },
    ControllerEntry {
        name: "graceful-eviction",
        wing: Wing::Failover,
        description: "ends an eviction task once the new placement is healthy or its grace period ran out",
        build: wiring::graceful_eviction,
    },
    ControllerEntry {
        name: "failback",
        wing: Wing::Failover,
        description: "moves a workload back to a recovered cluster after its stabilization window (opt-in)",
        build: wiring::failback,
    },
    ControllerEntry {
        name: "brake-publisher",
        wing: Wing::Failover,
        description: "publishes the eviction brake's state for the servers that do not lead (only when several share the store)",
        build: wiring::brake_publisher,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::runtime::testing::TestWorld;
    use std::collections::BTreeSet;

    #[tokio::test]
    async fn every_listed_controller_builds_and_runs_under_its_listed_name() {
        let world = TestWorld::new();
        let mut names = BTreeSet::new();
        for entry in CONTROLLERS {
            let built = (entry.build)(&world.ctx).expect(entry.name);
            assert_eq!(built.name(), entry.name, "the label of {}", entry.name);
            assert!(names.insert(entry.name), "{} is listed twice", entry.name);
            assert!(!entry.description.is_empty());
        }
        assert_eq!(names.len(), 16);
    }
}
