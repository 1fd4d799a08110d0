//! Several controllers on one in-memory store and fake clock (a [`TestWorld`]), each told its
//! keys in turn as the runtime would: the chains across controllers that no controller's own
//! tests can show. One test binary; each file of `controllers/` is one chain.
//!
//! [`TestWorld`]: flotilla_server::controllers::runtime::testing::TestWorld
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "controllers/application_failover.rs"]
mod application_failover;
#[path = "controllers/dry_run.rs"]
mod dry_run;
#[path = "controllers/failback.rs"]
mod failback;
#[path = "controllers/failover_chain.rs"]
mod failover_chain;
#[path = "controllers/propagation.rs"]
mod propagation;
