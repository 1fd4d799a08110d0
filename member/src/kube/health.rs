//! Whether the member's API server says it is healthy, as Karmada reads it
//! (`getClusterHealthStatus`): `GET /readyz`; only when that answers 404 (an API server too
//! old to have it), `GET /healthz`. 200 is healthy; any other answer is unhealthy; no answer
//! (connection refused, TLS failure, timeout) is offline, which is unhealthy too.

use std::time::Duration;

use http::{Request, StatusCode};
use kube::client::Body;
use kube::Client;

/// What one probe of a health endpoint saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The endpoint answered with this status code.
    Answered(u16),
    /// No answer: the reason.
    Offline(String),
}

/// Healthy when `/readyz` answers 200, or when it answers 404 and `/healthz` answers 200.
/// `healthz` is `None` when it was not asked.
pub fn healthy(readyz: &Probe, healthz: Option<&Probe>) -> bool {
    match readyz {
        Probe::Answered(200) => true,
        Probe::Answered(404) => healthz == Some(&Probe::Answered(200)),
        _ => false,
    }
}

/// Whether `/healthz` must be asked after this `/readyz` answer.
pub fn needs_healthz(readyz: &Probe) -> bool {
    *readyz == Probe::Answered(404)
}

/// Probes `/readyz` (and `/healthz` when needed) and answers whether the member is healthy,
/// with the probe that decided it (for logs).
pub async fn check(client: &Client, timeout: Duration) -> (bool, Probe) {
    let readyz = probe(client, "/readyz", timeout).await;
    if needs_healthz(&readyz) {
        let healthz = probe(client, "/healthz", timeout).await;
        return (healthy(&readyz, Some(&healthz)), healthz);
    }
    (healthy(&readyz, None), readyz)
}

async fn probe(client: &Client, path: &str, timeout: Duration) -> Probe {
    let request = match Request::get(path).body(Body::from(Vec::new())) {
        Ok(r) => r,
        Err(e) => return Probe::Offline(e.to_string()),
    };
    match tokio::time::timeout(timeout, client.send(request)).await {
        Ok(Ok(response)) => Probe::Answered(response.status().as_u16()),
        Ok(Err(e)) => Probe::Offline(flotilla_support::error_chain(&e)),
        Err(_) => Probe::Offline(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// The status code of a probe, for messages.
pub fn describe(p: &Probe) -> String {
    match p {
        Probe::Answered(code) => StatusCode::from_u16(*code)
            .map(|c| c.to_string())
            .unwrap_or_else(|_| code.to_string()),
        Probe::Offline(why) => format!("offline: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_then_healthz_only_on_404() {
        let ok = Probe::Answered(200);
        let table = [
            (Probe::Answered(200), None, false, true),
            (Probe::Answered(500), None, false, false),
            (Probe::Answered(403), None, false, false),
            (Probe::Offline("refused".into()), None, false, false),
            (Probe::Answered(404), Some(ok.clone()), true, true),
            (
                Probe::Answered(404),
                Some(Probe::Answered(500)),
                true,
                false,
            ),
            (
                Probe::Answered(404),
                Some(Probe::Answered(404)),
                true,
                false,
            ),
            (
                Probe::Answered(404),
                Some(Probe::Offline("x".into())),
                true,
                false,
            ),
        ];
        for (i, (readyz, healthz, asks, want)) in table.into_iter().enumerate() {
            assert_eq!(needs_healthz(&readyz), asks, "row {i}");
            assert_eq!(healthy(&readyz, healthz.as_ref()), want, "row {i}");
        }
        assert_eq!(describe(&Probe::Answered(503)), "503 Service Unavailable");
    }
}
