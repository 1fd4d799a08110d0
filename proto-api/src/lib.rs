//! `flotilla-api`: Flotilla's API types, serde-compatible with Karmada's YAML, plus the pure
//! helpers that go with them (kinds table, defaulting, validation, selectors, taint and
//! toleration matching, quantities). No I/O: server and agent both depend on this crate.

pub mod kinds;
