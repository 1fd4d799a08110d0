//! What several wings' controllers share and no one of them owns: the status [`aggregation`]
//! of a binding's Works, binding keys and the
//! live-binding read ([`binding_keys`]), the cached Clusters ([`cluster_cache`]), the cluster to
//! bindings index that wakes bindings on a Cluster change ([`fan_out`]), JSON edits
//! ([`json_edit`]), the interpreter seen as a template interpreter ([`interpretation`]), the
//! controllers' registered counters ([`metrics`]) and the reference to a binding's template that
//! Events are recorded on ([`template_ref`]).

pub mod aggregation;
pub mod binding_keys;
pub mod cluster_cache;
pub mod fan_out;
pub mod interpretation;
pub mod json_edit;
pub mod metrics;
pub mod template_ref;
