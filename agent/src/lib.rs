//! `flotilla-agent`: a member cluster's side of Flotilla.
//!
//! - [`runtime`]: the member runtime trait; `sim`, the embedded simulated cluster; `kube`, a
//!   real cluster through its Kubernetes API (kube-rs).
//! - [`member_api`]: the member's HTTP surface (readyz/healthz, apply/get/delete objects,
//!   cluster summary, fault API), which is what a push-mode member is to the server.
//! - [`pull`]: pull mode: register with the server, renew the lease, report cluster status,
//!   watch and apply Works, report their status.
//! - [`app`]: [`app::run`] starts one or many members from an [`app::AgentConfig`] and hands back
//!   an [`app::AgentHandle`] (bound address, members, shutdown).

pub mod app;
pub mod clock;
pub mod fsutil;
pub mod hashing;
pub mod member;
pub mod member_api;
pub mod pull;
pub mod runtime;

pub use app::{run, AgentConfig, AgentHandle, Mode, RuntimeKind};
pub use member::Member;

/// An error with its whole `source()` chain, `: `-separated, for logs.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// Waits until the flag turns true (or its sender is gone, which means the same: stop).
pub(crate) async fn stopped(flag: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await;
}
