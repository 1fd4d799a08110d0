//! `/metrics` in Prometheus text format: API request counts and latency by verb, resource and
//! code, and stored object counts per kind (read from the store at scrape time). Controllers
//! register their own metrics in the same registry.
//!
//! Label values come from a bounded set: a resource label names a served kind (and one of its
//! subresources); every path that names none shares the value [`UNMATCHED`], so requests for
//! made-up paths cannot grow the exposition.

use crate::kinds::KindRegistry;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts};
use std::sync::Arc;
use std::time::Instant;

/// The server's metrics.
#[derive(Clone)]
pub struct Metrics {
    /// The registry everything is registered in.
    pub registry: prometheus::Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    /// Stored objects per kind (storage name).
    pub objects: IntGaugeVec,
    /// Durable flushes of the store (group commit rounds), brought up to date at scrape time.
    pub flushes: IntCounter,
    /// Writes those flushes acknowledged, brought up to date at scrape time.
    pub flushed_writes: IntCounter,
    /// The registry of the controllers of this server's current term as leader, when several
    /// servers share the store (each term registers its controllers' metrics afresh).
    term: Arc<parking_lot::RwLock<Option<prometheus::Registry>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Creates and registers the API metrics.
    pub fn new() -> Result<Arc<Self>, prometheus::Error> {
        let registry = prometheus::Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "flotilla_apiserver_requests_total",
                "API requests by verb, resource and HTTP code.",
            ),
            &["verb", "resource", "code"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "flotilla_apiserver_request_duration_seconds",
                "API request latency by verb and resource (watches excluded).",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["verb", "resource"],
        )?;
        let objects = IntGaugeVec::new(
            Opts::new("flotilla_store_objects", "Stored objects per kind."),
            &["resource"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        let flushes = IntCounter::new(
            "flotilla_store_durable_flushes_total",
            "Durable flushes of the store; concurrent writes share one (group commit).",
        )?;
        let flushed_writes = IntCounter::new(
            "flotilla_store_flushed_writes_total",
            "Writes acknowledged by the store's durable flushes.",
        )?;
        registry.register(Box::new(objects.clone()))?;
        registry.register(Box::new(flushes.clone()))?;
        registry.register(Box::new(flushed_writes.clone()))?;
        Ok(Arc::new(Self {
            registry,
            requests,
            latency,
            objects,
            flushes,
            flushed_writes,
            term: Arc::new(parking_lot::RwLock::new(None)),
        }))
    }

    /// Sets (or, with `None`, clears) the registry of the current term's controllers.
    pub fn set_term_registry(&self, registry: Option<prometheus::Registry>) {
        *self.term.write() = registry;
    }

    /// Brings the store's durability counters up to what the store counted.
    pub fn observe_durability(&self, flushes: u64, writes: u64) {
        for (counter, total) in [(&self.flushes, flushes), (&self.flushed_writes, writes)] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let encoder = prometheus::TextEncoder::new();
        let mut families = self.registry.gather();
        if let Some(term) = self.term.read().as_ref() {
            families.extend(term.gather());
        }
        encoder
            .encode_to_string(&families)
            .unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
    }
}

/// The resource label of requests for paths that name no served kind.
pub const UNMATCHED: &str = "unmatched";

/// The verb and resource of a request, for metric labels. `served(group, version, plural)`
/// says whether a kind is served; paths of kinds it does not know are [`UNMATCHED`]. A
/// subresource gets a label of its own when it is stored (`status`, `finalize`) or
/// `computed(name)` says it is one the API computes (`scale`, `explain`).
pub fn classify(
    method: &str,
    path: &str,
    query: &str,
    served: impl Fn(&str, &str, &str) -> bool,
    computed: impl Fn(&str) -> bool,
) -> (&'static str, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return (verb_of(method, true, query), "other".into()),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let Some(plural) = rest.first().copied() else {
        return (verb_of(method, false, query), String::new());
    };
    let named = rest.len() >= 2;
    let verb = verb_of(method, named, query);
    if rest.len() > 3 || !served(group, version, plural) {
        return (verb, UNMATCHED.into());
    }
    match rest.get(2) {
        Some(sub) if matches!(*sub, "status" | "finalize") || computed(sub) => {
            (verb, format!("{plural}/{sub}"))
        }
        Some(_) => (verb, UNMATCHED.into()),
        None => (verb, plural.to_string()),
    }
}

fn verb_of(method: &str, named: bool, query: &str) -> &'static str {
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match (method, named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

/// What the request-metrics middleware needs.
#[derive(Clone, Debug)]
pub struct RecordState {
    /// Where requests are counted.
    pub metrics: Arc<Metrics>,
    /// Which kinds are served (for the resource label).
    pub registry: Arc<KindRegistry>,
    /// Which subresources the API computes (they get a label of their own).
    pub computed_subresource: fn(&str) -> bool,
}

/// Middleware: counts every request and times non-watch ones.
pub async fn record(State(state): State<RecordState>, req: Request, next: Next) -> Response {
    let (verb, resource) = classify(
        req.method().as_str(),
        req.uri().path(),
        req.uri().query().unwrap_or(""),
        |g, v, p| state.registry.serves(g, v, p),
        state.computed_subresource,
    );
    let metrics = &state.metrics;
    let start = Instant::now();
    let response = next.run(req).await;
    let code = response.status().as_u16().to_string();
    metrics
        .requests
        .with_label_values(&[verb, &resource, &code])
        .inc();
    if verb != "watch" {
        metrics
            .latency
            .with_label_values(&[verb, &resource])
            .observe(start.elapsed().as_secs_f64());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        let table = [
            (
                "GET",
                "/apis/apps/v1/namespaces/d/deployments",
                "",
                ("list", "deployments"),
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/d/deployments/x",
                "",
                ("get", "deployments"),
            ),
            ("GET", "/api/v1/pods", "watch=true", ("watch", "pods")),
            (
                "PUT",
                "/apis/work.karmada.io/v1alpha2/namespaces/d/resourcebindings/x/status",
                "",
                ("update", "resourcebindings/status"),
            ),
            (
                "DELETE",
                "/apis/cluster.karmada.io/v1alpha1/clusters/m1",
                "",
                ("delete", "clusters"),
            ),
            ("GET", "/api/v1/namespaces", "", ("list", "namespaces")),
            ("GET", "/healthz", "", ("get", "other")),
            (
                "GET",
                "/apis/apps/v1/namespaces/d/made-up",
                "",
                ("list", "unmatched"),
            ),
            ("GET", "/api/v1/x1", "", ("list", "unmatched")),
            (
                "GET",
                "/apis/no.such.group/v1/things/a",
                "",
                ("get", "unmatched"),
            ),
            (
                "GET",
                "/apis/apps/v2/deployments",
                "",
                ("list", "unmatched"),
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/d/deployments/x/made-up",
                "",
                ("get", "unmatched"),
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/d/deployments/x/scale/more",
                "",
                ("get", "unmatched"),
            ),
            ("GET", "/apis/apps/v1", "", ("list", "")),
        ];
        let reg = KindRegistry::new();
        for (m, p, q, (verb, res)) in table {
            let got = classify(
                m,
                p,
                q,
                |g, v, p| reg.serves(g, v, p),
                crate::api::computed::is_subresource,
            );
            assert_eq!((got.0, got.1.as_str()), (verb, res), "{m} {p}");
        }
    }

    #[test]
    fn renders_registered_metrics() {
        let m = Metrics::new().unwrap();
        m.requests.with_label_values(&["get", "pods", "200"]).inc();
        assert!(m.render().contains("flotilla_apiserver_requests_total"));
    }
}
