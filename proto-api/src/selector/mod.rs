//! Selectors: which objects a query or a policy picks.
//!
//! - [`label`]: Kubernetes `LabelSelector` objects and the `?labelSelector=` query language,
//!   both compiled to [`LabelRequirements`] that match label maps.
//! - [`field`]: the `?fieldSelector=` query language, matched against an object's JSON.
//! - [`node`]: node-selector requirements (`In|NotIn|Exists|DoesNotExist|Gt|Lt`), the shape
//!   of Karmada's cluster `fieldSelector`.

pub mod field;
pub mod label;
pub mod node;

pub use field::{FieldOperator, FieldRequirement, FieldSelector};
pub use label::{
    LabelRequirements, LabelSelector, LabelSelectorOperator, LabelSelectorRequirement, Operator,
    Requirement, SelectorError,
};
pub use node::{NodeSelectorOperator, NodeSelectorRequirement};
