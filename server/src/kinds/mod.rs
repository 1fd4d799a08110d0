//! Which kinds the server serves, below both the API and the controllers (each reads the
//! [`KindRegistry`]; neither feeds it). The built-in kinds are fixed; the kinds of
//! CustomResourceDefinitions come from the store alone, through [`crd_feed`]: it lists the
//! stored CRDs before the server serves anything, then follows their watch, so a CRD counts
//! exactly while it is stored — however it got there or went (API, finalizer removal, a
//! restart).
//!
//! Discovery does not lag a CRD write: the API answers a CRD write only once the registry has
//! applied the store revision of that kind's last change (`KindRegistry::caught_up`), so a
//! client that writes a CRD and then asks discovery sees its own write. One writer (the feed)
//! and one wait keep the registry equal to the store; registering on the HTTP write path as
//! well would be a second, racing writer (it re-registered a CRD that a finalizer removal had
//! just deleted).

pub mod crd_feed;
pub mod registry;

pub use crd_feed::CrdFeed;
pub use registry::{crd_name, kinds_of_crd, plural_of_kind, KindRegistry};
