//! Events: every decision a user would ask about ("why did my app move?", "why is my cluster
//! tainted?") is recorded as a core/v1 Event on the object it concerns and counted in
//! `flotilla_events_total{type, reason}`. Recording never fails the caller; a failed write is
//! logged.

use crate::clock::SharedClock;
use crate::store::Store;
use flotilla_api::kinds::well_known;
use flotilla_api::meta::Time;
use prometheus::IntCounterVec;
use serde_json::{json, Value};
use std::sync::Arc;

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Routine.
    Normal,
    /// Something a user may need to act on.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Writes Events.
#[derive(Clone)]
pub struct EventRecorder {
    store: Arc<dyn Store>,
    clock: SharedClock,
    component: &'static str,
    counter: IntCounterVec,
}

impl EventRecorder {
    /// A recorder for `component`, counting into `registry` (shared by every recorder: the
    /// counter is registered once and reused).
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        component: &'static str,
        registry: &prometheus::Registry,
    ) -> Result<Self, prometheus::Error> {
        let counter = IntCounterVec::new(
            prometheus::Opts::new(
                "flotilla_events_total",
                "Events recorded, by type and reason.",
            ),
            &["type", "reason"],
        )?;
        let counter = match registry.register(Box::new(counter.clone())) {
            Ok(()) => counter,
            Err(prometheus::Error::AlreadyReg) => {
                return Err(prometheus::Error::Msg(
                    "flotilla_events_total is already registered; clone the first recorder".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            store,
            clock,
            component,
            counter,
        })
    }

    /// The same recorder under another component name.
    pub fn for_component(&self, component: &'static str) -> Self {
        Self {
            component,
            ..self.clone()
        }
    }

    /// Records an event about `object` (any stored object).
    pub async fn record(&self, object: &Value, kind: EventType, reason: &str, message: &str) {
        let now = self.clock.now();
        let meta = object.get("metadata").cloned().unwrap_or(json!({}));
        let name = meta["name"].as_str().unwrap_or("unknown");
        let namespace = meta["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        let suffix = format!(
            "{:x}{:04x}",
            now.timestamp_nanos_opt().unwrap_or_default(),
            rand::random::<u16>()
        );
        let mut involved = json!({
            "apiVersion": object.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": object.get("kind").cloned().unwrap_or(Value::Null),
            "name": name,
            "uid": meta.get("uid").cloned().unwrap_or(Value::Null),
            "resourceVersion": meta.get("resourceVersion").cloned().unwrap_or(Value::Null),
        });
        if let Some(ns) = meta["namespace"].as_str().filter(|s| !s.is_empty()) {
            involved["namespace"] = json!(ns);
        }
        let stamp = Time::new(now).to_string();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{suffix}"), "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind.as_str(),
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        });
        self.counter
            .with_label_values(&[kind.as_str(), reason])
            .inc();
        if let Err(e) = self.store.create(&well_known::events(), event).await {
            tracing::warn!(object = name, reason, error = %e, "recording an event failed");
        }
    }

    /// Records an event about a Cluster.
    pub async fn cluster(&self, cluster: &Value, kind: EventType, reason: &str, message: &str) {
        self.record(cluster, kind, reason, message).await;
    }
}
