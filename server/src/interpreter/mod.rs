//! The resource interpreter: what Flotilla knows about the *inside* of a resource template.
//! So far: [`jsonpath`], the Kubernetes JSONPath templates of `statePreservation` rules.

pub mod jsonpath;
