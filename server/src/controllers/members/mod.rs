//! Members: what the control plane knows of each member cluster and how Works reach the ones it
//! pushes to. [`cluster_status`] keeps each Cluster's Ready condition (with the pure
//! [`cluster_health`]) and, for pull members, whether their lease fits the server's grace
//! period (the pure [`lease_renewal`]), [`cluster_taints`] the taints that follow from it,
//! [`cluster_taint_policy`] the taints ClusterTaintPolicies declare, [`cluster_removal`] keeps a
//! deleted Cluster until its bindings left it and its Works are gone, and [`push_execution`]
//! applies Works to push members and reads their status back, reaching each as
//! [`member_credentials`] says (a Kubernetes API with a token, or a simulated member).
//! [`support`] holds what several of them share (reading a Cluster, writing its taints, their
//! counters).

pub mod cluster_health;
pub mod cluster_removal;
pub mod cluster_status;
pub mod cluster_taint_policy;
pub mod cluster_taints;
pub mod lease_renewal;
pub mod member_credentials;
pub mod push_execution;
pub mod support;
