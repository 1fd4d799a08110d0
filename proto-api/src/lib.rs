//! `flotilla-api`: Flotilla's API types, serde-compatible with Karmada's YAML, plus the pure
//! helpers that go with them. No I/O: server and agent both depend on this crate.
//!
//! - Objects: [`cluster`], [`policy`], [`binding`], [`work`], [`event`], sharing [`meta`]
//!   (metadata, timestamps, conditions) and [`quantity`] (resource quantities).
//! - Deciding with them: [`selector`] (label and field selectors), [`affinity`] (does a cluster
//!   match a cluster affinity), [`taint_toleration`] (which taints are tolerated, for how long).
//! - [`kinds`]: the table of kinds the API serves.

pub mod affinity;
pub mod binding;
pub mod cluster;
pub mod event;
pub mod kinds;
pub mod meta;
pub mod names;
pub mod policy;
pub mod quantity;
pub mod selector;
pub mod taint_toleration;
pub mod work;

pub use meta::{Condition, ConditionStatus, Object, ObjectMeta, OwnerReference, Time};
pub use quantity::{Quantity, ResourceList};
