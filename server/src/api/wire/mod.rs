//! How objects travel between a client and the store: request and answer bodies in JSON or
//! YAML with their limits ([`body`], [`nesting`]), what a resource path addresses and how a
//! stored object is shown in the answer ([`target`], [`views`], [`events_v1`] for
//! `events.k8s.io/v1` over the stored core Events), `kubectl get`'s Tables ([`table`]), watch
//! streams ([`watch`]) and the Prometheus exposition of `/metrics` ([`metrics`]).
//!
//! Stands on [`crate::api::access`] (a target's authorization place) and
//! [`crate::api::http`].

pub mod body;
pub mod events_v1;
pub mod metrics;
pub mod nesting;
pub mod table;
pub mod target;
pub mod views;
pub mod watch;
