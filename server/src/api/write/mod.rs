//! The path of every write to a stored kind: admission between decoding a body and storing it
//! (names, strict field validation, Karmada's defaulting and validation, CRD checks:
//! [`admission`]), the PATCH bodies (merge, JSON, strategic merge, server-side apply:
//! [`patch`]) and the changed object's compare-and-swap write shared by PUT, PATCH and `scale`
//! ([`update`]).

pub mod admission;
pub mod patch;
pub mod update;
