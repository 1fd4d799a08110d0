//! `flotilla-support`: process plumbing the server, the agent and the member runtimes share,
//! written once so that both binaries behave alike. No async runtime, no HTTP: plain std.
//!
//! - [`clock`]: time as a [`clock::Clock`], so that tests drive timeouts with a
//!   [`clock::FakeClock`] instead of sleeping.
//! - [`error_chain`]: an error and every error behind it, on one line, for logs and conditions.
//! - [`files`]: durable file writes (temporary file, fsync, rename), private (0600) ones for
//!   tokens, keys and credentials.

pub mod clock;
pub mod error_chain;
pub mod files;

pub use error_chain::error_chain;
