//! `flotilla-api`: Flotilla's API types, serde-compatible with Karmada's YAML, plus the pure
//! helpers that go with them. No I/O: server and agent both depend on this crate.
//!
//! - Objects: [`cluster`], [`policy`], [`binding`], [`work`], [`event`], sharing [`meta`]
//!   (metadata, timestamps, conditions) and [`quantity`] (resource quantities).
//! - Deciding with them: [`selector`] (label and field selectors), [`affinity`] (does a cluster
//!   match a cluster affinity), [`taint_toleration`] (which taints are tolerated, for how long).
//! - Admitting them: [`admission::admit`] decodes, defaults ([`defaulting`]) and validates
//!   ([`validation`]) an object before the API stores it; [`validation::strict_unknown_fields`]
//!   serves `fieldValidation=Strict`.
//! - [`kinds`]: the table of kinds the API serves.
//! - [`simulation`]: the failover dry-run (`FailoverSimulation`, create only, never stored).
//! - [`history`]: a binding's bounded failover history (`status.failoverHistory`) and the
//!   fleet-wide list of recent failovers.
//! - [`json_pointer`]: JSON Pointer lookups that allocate nothing for plain tokens.
//! - [`pod_requests`]: a pod's effective resource request as Kubernetes sums it (app
//!   containers, init and native sidecar containers, overhead), for the interpreter's replica
//!   requirements and the member runtimes' schedulers and resource summaries.
//! - [`member_timing`]: the lease and status periods a server advertises to its pull agents,
//!   and whether a member's lease fits the server's grace period.

pub mod admission;
pub mod affinity;
pub mod binding;
pub mod cluster;
pub mod defaulting;
pub mod event;
pub mod history;
pub mod json_pointer;
pub mod kinds;
pub mod member_timing;
pub mod meta;
pub mod names;
pub mod pod_requests;
pub mod policy;
pub mod quantity;
pub mod selector;
mod shape;
pub mod simulation;
pub mod taint_toleration;
pub mod validation;
pub mod work;

pub use admission::{admit, AdmittedKind};
pub use defaulting::DefaultingConfig;
pub use meta::{Condition, ConditionStatus, Object, ObjectMeta, OwnerReference, Time};
pub use quantity::{Quantity, ResourceList};
pub use validation::{FieldError, FieldErrorKind, ValidationErrors};
