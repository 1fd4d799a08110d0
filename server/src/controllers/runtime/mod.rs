//! The controller runtime: how a controller runs ([`controller`]: sources, work queue, workers,
//! resync, metrics), its [`queue`] of keys, the shared rate [`limiter`], the record of a
//! controller's [`own_writes`] that must not wake it again, and the fakes of
//! `testing` (tests and the `testing` feature only).

pub mod controller;
pub mod limiter;
pub mod own_writes;
pub mod queue;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
