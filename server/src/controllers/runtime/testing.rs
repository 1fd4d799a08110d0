//! What controller tests are built on: [`TestWorld`] (an in-memory store, a fake clock, an
//! Event recorder, a metrics registry and the [`ControllerContext`] made of them) and the fake
//! interpreter [`SpecReplicas`]; how they wait is [`crate::testing::eventually`]. Compiled only
//! for tests and under the crate's `testing` feature, so that the multi-controller tests in
//! `server/tests/controllers/` use the same world as the tests beside each controller; a plain
//! build of the server leaves it out.

use crate::controllers::context::ControllerContext;
use crate::controllers::settings::ControllerSettings;
use crate::controllers::shared::interpretation::TemplateInterpreter;
use crate::events::EventRecorder;
use crate::interpreter::{InterpretError, ObjectRef};
use crate::kinds::KindRegistry;
use crate::probes::HttpMemberClient;
use crate::store::{KvStore, ListOptions, Store, StoreConfig};
use chrono::{DateTime, TimeZone, Utc};
use flotilla_api::binding::{AggregatedStatusItem, ReplicaRequirements};
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::{well_known, ResourceType};
use flotilla_api::work::ResourceHealth;
use flotilla_support::clock::{FakeClock, SharedClock};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// One controller test's world: every controller and fake built from it shares its store,
/// clock and metrics registry.
#[derive(Clone)]
pub struct TestWorld {
    /// The clock the store, the recorder and the controllers read; tests move it.
    pub clock: Arc<FakeClock>,
    /// The same clock, as the controllers take it.
    pub shared_clock: SharedClock,
    /// An in-memory store on that clock.
    pub store: Arc<dyn Store>,
    /// Where the context registered its metrics.
    pub metrics: prometheus::Registry,
    /// The context, as the server builds it (default settings unless given).
    pub ctx: ControllerContext,
}

impl TestWorld {
    /// The time a world starts at unless told otherwise: 2023-11-14T22:13:20Z.
    pub fn epoch() -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000, 0)
            .single()
            .unwrap_or_default()
    }

    /// A world at [`TestWorld::epoch`] with the default settings.
    pub fn new() -> Self {
        Self::at(Self::epoch())
    }

    /// A world whose clock starts at `now`, with the default settings.
    pub fn at(now: DateTime<Utc>) -> Self {
        Self::with_settings(now, ControllerSettings::default())
    }

    /// A world whose clock starts at `now`, with `settings`.
    ///
    /// # Panics
    /// If the context cannot be built, which a fresh registry and store never refuse.
    pub fn with_settings(now: DateTime<Utc>, settings: ControllerSettings) -> Self {
        let clock = Arc::new(FakeClock::new(now));
        let shared_clock: SharedClock = clock.clone();
        let store: Arc<dyn Store> = KvStore::memory(StoreConfig::with_clock(shared_clock.clone()));
        Self::over(clock, store, settings)
    }

    /// The world a restarted server finds: the same store and clock, and a context built anew
    /// over them (a fresh Event recorder, metrics registry and brake), with the same settings.
    pub fn restarted(&self) -> Self {
        Self::over(
            self.clock.clone(),
            self.store.clone(),
            self.ctx.settings.clone(),
        )
    }

    /// A context and a fresh metrics registry over `store` and `clock`.
    fn over(clock: Arc<FakeClock>, store: Arc<dyn Store>, settings: ControllerSettings) -> Self {
        let shared_clock: SharedClock = clock.clone();
        let metrics = prometheus::Registry::new();
        // Building it opens no connection; tests that probe members use a fake of their own.
        let member =
            Arc::new(HttpMemberClient::new(Duration::from_secs(1)).expect("an HTTP client builds"));
        let ctx = ControllerContext::new(
            store.clone(),
            Arc::new(KindRegistry::new()),
            shared_clock.clone(),
            member,
            &metrics,
            settings,
        )
        .expect("a fresh registry takes every metric");
        Self {
            clock,
            shared_clock,
            store,
            metrics,
            ctx,
        }
    }

    /// The context's Event recorder.
    pub fn events(&self) -> EventRecorder {
        self.ctx.events.clone()
    }

    /// The current time of the world's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.shared_clock.now()
    }

    /// Stores the Cluster `name` with `spec`, then writes `status` through its status
    /// subresource as a member's status report would (a create drops the status); answers the
    /// stored Cluster.
    ///
    /// # Panics
    /// If the store refuses either write.
    pub async fn cluster(&self, name: &str, spec: Value, status: Value) -> Value {
        let rt = well_known::clusters();
        let mut c = self
            .stored(
                &rt,
                json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": name}, "spec": spec}),
            )
            .await;
        c["status"] = status;
        self.store
            .update_status(&rt, c)
            .await
            .expect("the Cluster's status is stored")
    }

    /// Stores the ResourceBindings `default/broken-array`, `default/broken-string` and
    /// `default/good`, each with the spec `spec_of(name)`, then writes the first two a malformed
    /// status (an array, a string) around the API, as older data or a bug would leave it;
    /// answers the three names.
    ///
    /// # Panics
    /// If the store refuses a write.
    pub async fn bindings_with_malformed_status(
        &self,
        spec_of: impl Fn(&str) -> Value,
    ) -> [&'static str; 3] {
        let rt = well_known::resource_bindings();
        let names = ["broken-array", "broken-string", "good"];
        for name in names {
            self.stored(
                &rt,
                json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": spec_of(name)}),
            )
            .await;
        }
        for (name, bad) in [("broken-array", json!([1])), ("broken-string", json!("x"))] {
            let mut b = self
                .store
                .get(&rt, Some("default"), name)
                .await
                .expect("the binding is read");
            b["status"] = bad;
            self.store
                .update_status(&rt, b)
                .await
                .expect("the malformed status is stored");
        }
        names
    }

    /// Creates `obj` in the store; answers it as stored.
    ///
    /// # Panics
    /// If the store refuses it.
    async fn stored(&self, rt: &ResourceType, obj: Value) -> Value {
        self.store
            .create(rt, obj)
            .await
            .unwrap_or_else(|e| panic!("a {} is stored: {e}", rt.kind))
    }

    /// Every Event in the store, in every namespace.
    ///
    /// # Panics
    /// If the store cannot list them.
    pub async fn stored_events(&self) -> Vec<Value> {
        stored_events(&self.store).await
    }
}

/// The ResourceBinding `default/nginx-deployment` the controller tests store, if it is.
pub async fn nginx_binding(store: &Arc<dyn Store>) -> Option<Value> {
    store
        .get(
            &well_known::resource_bindings(),
            Some("default"),
            "nginx-deployment",
        )
        .await
        .ok()
}

/// Every Event in `store`, in every namespace.
///
/// # Panics
/// If the store cannot list them.
pub async fn stored_events(store: &Arc<dyn Store>) -> Vec<Value> {
    store
        .list(&well_known::events(), None, &ListOptions::default())
        .await
        .expect("the Events list")
        .items
}

impl Default for TestWorld {
    fn default() -> Self {
        Self::new()
    }
}

/// An interpreter that reads and writes `spec.replicas`, calls an object healthy when
/// `status.readyReplicas >= spec.replicas`, and sums `readyReplicas` into the template.
pub struct SpecReplicas;

impl TemplateInterpreter for SpecReplicas {
    fn replicas(&self, t: &Value) -> Result<(i32, Option<ReplicaRequirements>), InterpretError> {
        let n = t
            .lookup("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        Ok((i32::try_from(n).unwrap_or(0), None))
    }

    fn revise_replicas(&self, manifest: &Value, replicas: i32) -> Result<Value, InterpretError> {
        let mut m = manifest.clone();
        if m.lookup("/spec/replicas").is_some() {
            m["spec"]["replicas"] = json!(replicas);
        }
        Ok(m)
    }

    fn reflect_status(&self, o: &Value) -> Option<Value> {
        o.get("status").filter(|s| !s.is_null()).cloned()
    }

    fn health(&self, o: &Value) -> ResourceHealth {
        let want = o
            .lookup("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        match o.lookup("/status/readyReplicas").and_then(Value::as_i64) {
            Some(r) if r >= want => ResourceHealth::Healthy,
            Some(_) => ResourceHealth::Unhealthy,
            None => ResourceHealth::Unknown,
        }
    }

    fn has_health_rule(&self, _: &Value) -> bool {
        true
    }

    fn aggregate_status(&self, _: &Value, items: &[AggregatedStatusItem]) -> Option<Value> {
        let ready: i64 = items
            .iter()
            .filter_map(|i| i.status.as_ref()?.get("readyReplicas")?.as_i64())
            .sum();
        Some(json!({"readyReplicas": ready}))
    }

    fn dependencies(&self, _: &Value) -> Result<Vec<ObjectRef>, InterpretError> {
        Ok(Vec::new())
    }
}

/// A Pull-mode Cluster `name`, as a test stores it.
pub fn pull_cluster(name: &str) -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name}, "spec": {"syncMode": "Pull"}})
}

/// A Work in `karmada-es-<cluster>` of a two-replica Deployment `web`: `applied` sets its
/// Applied condition, `ready` the member's readyReplicas, `deleting` a deletionTimestamp.
pub fn work_of_web(
    cluster: &str,
    applied: Option<bool>,
    ready: Option<i64>,
    deleting: bool,
) -> Value {
    let mut w = json!({"metadata": {"name": "w", "namespace": format!("karmada-es-{cluster}")},
        "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}}]}}});
    if let Some(a) = applied {
        w["status"]["conditions"] = json!([{"type": "Applied", "status": if a { "True" } else { "False" }, "message": if a { "ok" } else { "boom" }}]);
    }
    if let Some(r) = ready {
        w["status"]["manifestStatuses"] =
            json!([{"identifier": {}, "status": {"readyReplicas": r}}]);
    }
    if deleting {
        w["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    w
}
