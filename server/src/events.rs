//! Events: every decision a user would ask about ("why did my app move?", "why is my cluster
//! tainted?") is recorded as a core/v1 Event on the object it concerns and counted in
//! `flotilla_events_total{type, reason}`. Recording never fails the caller; a failed write is
//! logged. As Kubernetes' event correlator does, an Event that repeats one recorded within the
//! last ten minutes (same component, object, type, reason and message) bumps that Event's
//! `count` and `lastTimestamp` instead of adding another.

use crate::store::Store;
use chrono::{DateTime, Utc};
use flotilla_api::kinds::well_known;
use flotilla_api::meta::Time;
use flotilla_support::clock::SharedClock;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// How long a recorded Event absorbs its repeats (Kubernetes' correlator: 10 minutes).
const REPEAT_WINDOW: chrono::Duration = chrono::Duration::minutes(10);
/// How many recent Events are remembered for correlation.
const REMEMBERED: usize = 4096;

/// The last Event recorded for one (component, object, type, reason, message).
#[derive(Clone)]
struct Recent {
    namespace: String,
    name: String,
    at: DateTime<Utc>,
}

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
    recent: Arc<Mutex<HashMap<u64, Recent>>>,
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
            recent: Arc::default(),
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
        // Read in place: an object's metadata can be large (annotations, owners).
        let meta = object.get("metadata").unwrap_or(&Value::Null);
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
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.component, kind.as_str(), reason, message).hash(&mut h);
            involved["apiVersion"].to_string().hash(&mut h);
            involved["kind"].to_string().hash(&mut h);
            involved["namespace"].to_string().hash(&mut h);
            name.hash(&mut h);
            involved["uid"].to_string().hash(&mut h);
            h.finish()
        };
        let recent = self.recent.lock().get(&key).cloned();
        if let Some(recent) = recent.filter(|r| now - r.at < REPEAT_WINDOW) {
            if self.bump(&recent, &stamp).await {
                self.remember(key, Recent { at: now, ..recent });
                return;
            }
        }
        let event_name = event["metadata"]["name"].as_str().unwrap_or("").to_string();
        // Not waited for: the controller's decision is already durable, and an Event lost in
        // a crash costs nothing else (the next durable write carries it to disk anyway).
        match self
            .store
            .create_eventually_durable(&well_known::events(), event)
            .await
        {
            Ok(_) => self.remember(
                key,
                Recent {
                    namespace: namespace.to_string(),
                    name: event_name,
                    at: now,
                },
            ),
            Err(e) => {
                tracing::warn!(object = name, reason, error = %e, "recording an event failed");
            }
        }
    }

    /// Bumps the count and lastTimestamp of a recorded Event; false when it is gone (or keeps
    /// conflicting), so that a new one is created.
    async fn bump(&self, recent: &Recent, stamp: &str) -> bool {
        let rt = well_known::events();
        for _ in 0..3 {
            let Ok(mut event) = self
                .store
                .get(&rt, Some(&recent.namespace), &recent.name)
                .await
            else {
                return false;
            };
            let count = event["count"].as_i64().unwrap_or(1);
            event["count"] = json!(count + 1);
            event["lastTimestamp"] = json!(stamp);
            match self.store.update_eventually_durable(&rt, event).await {
                Ok(_) => return true,
                Err(crate::store::StoreError::Conflict { .. }) => continue,
                Err(_) => return false,
            }
        }
        false
    }

    /// Remembers the Event recorded for `key`, forgetting old ones when too many are known.
    fn remember(&self, key: u64, recent: Recent) {
        let mut known = self.recent.lock();
        if known.len() >= REMEMBERED {
            let horizon = recent.at - REPEAT_WINDOW;
            known.retain(|_, r| r.at > horizon);
            if known.len() >= REMEMBERED {
                known.clear();
            }
        }
        known.insert(key, recent);
    }

    /// Records an event about a Cluster.
    pub async fn cluster(&self, cluster: &Value, kind: EventType, reason: &str, message: &str) {
        self.record(cluster, kind, reason, message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{KvStore, StoreConfig};
    use flotilla_support::clock::{FakeClock, SharedClock};

    #[tokio::test]
    async fn a_repeated_event_bumps_its_count_within_ten_minutes() {
        let clock = FakeClock::new(chrono::Utc::now());
        let shared: SharedClock = Arc::new(clock.clone());
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(shared.clone()));
        let events =
            EventRecorder::new(store.clone(), shared, "test", &prometheus::Registry::new())
                .unwrap();
        let binding = json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "b", "namespace": "default", "uid": "u1"}});
        let list = || async {
            let mut items = store
                .list(&well_known::events(), None, &Default::default())
                .await
                .unwrap()
                .items;
            items.sort_by_key(|e| e["firstTimestamp"].as_str().unwrap_or("").to_string());
            items
                .iter()
                .map(|e| {
                    (
                        e["reason"].as_str().unwrap_or("").to_string(),
                        e["count"].as_i64().unwrap_or(0),
                    )
                })
                .collect::<Vec<_>>()
        };
        events
            .record(&binding, EventType::Warning, "Held", "no other cluster")
            .await;
        clock.advance(chrono::Duration::seconds(30));
        events
            .record(&binding, EventType::Warning, "Held", "no other cluster")
            .await;
        assert_eq!(list().await, [("Held".to_string(), 2)]);
        // Another message, another object, or another reason: another Event.
        events
            .record(&binding, EventType::Warning, "Held", "something else")
            .await;
        let other = json!({"kind": "ResourceBinding", "metadata": {"name": "c", "namespace": "default", "uid": "u2"}});
        events
            .record(&other, EventType::Warning, "Held", "no other cluster")
            .await;
        assert_eq!(list().await.len(), 3);
        // Past the window, a repeat starts a new Event.
        clock.advance(chrono::Duration::minutes(11));
        events
            .record(&binding, EventType::Warning, "Held", "no other cluster")
            .await;
        let all = list().await;
        assert_eq!(all.len(), 4, "{all:?}");
        assert_eq!(all[0], ("Held".to_string(), 2));
        assert_eq!(all[3], ("Held".to_string(), 1));
    }
}
