//! What the eviction brake shows, and how the servers that do not lead see it. The brake's
//! buckets live in the leader's memory (brake.rs), so a standby server cannot compute
//! `kubectl get evictionbrakes` itself. While several servers share one store, the leader's
//! `brake-publisher` controller writes the brake's `EvictionBrake` objects into the ConfigMap
//! `karmada-system/flotilla-eviction-brakes` ([`PUBLISHED_NAMESPACE`], [`PUBLISHED_NAME`]),
//! whenever they change and at most once a second, through the leader's fenced store (a deposed
//! leader publishes nothing). A standby answers from it, each object annotated with when it
//! was published ([`PUBLISHED_AT_ANNOTATION`]). One server alone never publishes: it serves the
//! brake it runs.
//!
//! The pure parts: [`object`] (one region's report as an `EvictionBrake`), [`objects_of`] (every
//! region's, as the API shows them), [`published`] (the ConfigMap for a set of objects) and
//! [`read_published`] (the objects a ConfigMap holds).

use crate::controllers::failover::brake::{
    EvictionBrake, Pace, RegionReport, RegionState, CLUSTERS, EVICTIONS, NO_REGION,
};
use crate::controllers::runtime::controller::{Action, ReconcileError, Reconciler};
use crate::controllers::shared::cluster_cache::{self, Clusters};
use crate::store::{Store, StoreError};
use chrono::{DateTime, SecondsFormat, Utc};
use flotilla_api::kinds::{well_known, FLOTILLA_GROUP};
use flotilla_support::clock::SharedClock;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The kind.
pub const KIND: &str = "EvictionBrake";
/// The object name of the clusters without a region.
pub const NO_REGION_NAME: &str = "no-region";
/// The namespace of the ConfigMap the leader publishes the brake's objects in.
pub const PUBLISHED_NAMESPACE: &str = "karmada-system";
/// The ConfigMap's name.
pub const PUBLISHED_NAME: &str = "flotilla-eviction-brakes";
/// The ConfigMap's key holding the objects (a JSON array).
pub const PUBLISHED_KEY: &str = "evictionbrakes.json";
/// The annotation of a published object: when the leader published it.
pub const PUBLISHED_AT_ANNOTATION: &str = "flotilla.io/published-at";
/// The one key the controller reconciles.
pub const KEY: &str = "evictionbrakes";
/// How often the leader looks again (held counts and time-driven states change without a
/// cluster changing).
pub const PERIOD: Duration = Duration::from_secs(1);

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The object for one region's report.
pub fn object(
    r: &RegionReport,
    fleet: (usize, usize),
    started: DateTime<Utc>,
    grace_until: DateTime<Utc>,
) -> Value {
    let v = &r.view;
    let name = if v.region == NO_REGION {
        NO_REGION_NAME
    } else {
        v.region.as_str()
    };
    let mut status = json!({
        "region": v.region,
        "state": v.state.as_str(),
        "rate": v.pace.describe(CLUSTERS),
        "clusters": v.counts.clusters,
        "notReadyClusters": v.counts.not_ready,
        "fleetClusters": fleet.0,
        "fleetNotReadyClusters": fleet.1,
        "heldEvictions": r.held,
        "releasedClusters": r.released.iter().map(|t| json!({"name": t.cluster, "releasedAt": stamp(t.at)})).collect::<Vec<_>>(),
        "queuedClusters": r.queued.iter().map(|t| json!({"name": t.cluster, "turnAt": stamp(t.at)})).collect::<Vec<_>>(),
        "message": v.reason,
    });
    if let Pace::PerSecond(rate) = v.pace {
        status["clustersPerSecond"] = json!(rate);
    }
    if let Some(ceiling) = v.ceiling {
        status["resourceEvictionRate"] = json!(ceiling.describe(EVICTIONS));
    }
    if v.state == RegionState::StartupGrace {
        status["startupGraceUntil"] = json!(stamp(grace_until));
    }
    json!({
        "apiVersion": format!("{FLOTILLA_GROUP}/v1alpha1"),
        "kind": KIND,
        "metadata": {"name": name, "creationTimestamp": stamp(started)},
        "status": status,
    })
}

/// Every region's object, in region order, as `brake` sees `clusters` at `now`.
pub fn objects_of(brake: &EvictionBrake, clusters: &Clusters, now: DateTime<Utc>) -> Vec<Value> {
    let view = brake.view(clusters, now);
    let fleet = (view.fleet.clusters, view.fleet.not_ready);
    brake
        .report(clusters, now)
        .iter()
        .map(|r| object(r, fleet, brake.started(), view.grace_until))
        .collect()
}

/// The ConfigMap that publishes `objects`, stamped `at` (the stamp is not part of what is
/// compared: see [`published_text`]).
pub fn published(objects: &[Value], at: DateTime<Utc>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PUBLISHED_NAME,
            "namespace": PUBLISHED_NAMESPACE,
            "annotations": {PUBLISHED_AT_ANNOTATION: at.to_rfc3339_opts(SecondsFormat::Millis, true)},
        },
        "data": {PUBLISHED_KEY: published_text(objects)},
    })
}

/// The text a ConfigMap holds for `objects`: the leader writes only when it changes.
pub fn published_text(objects: &[Value]) -> String {
    Value::Array(objects.to_vec()).to_string()
}

/// The objects a published ConfigMap holds, each annotated with when it was published (empty
/// when it holds none or cannot be read).
pub fn read_published(config_map: &Value) -> Vec<Value> {
    let at = config_map["metadata"]["annotations"][PUBLISHED_AT_ANNOTATION].clone();
    let Some(Value::Array(objects)) = config_map["data"][PUBLISHED_KEY]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
    else {
        return Vec::new();
    };
    objects
        .into_iter()
        .map(|mut o| {
            if o["metadata"].is_object() {
                o["metadata"]["annotations"] = json!({PUBLISHED_AT_ANNOTATION: at});
            }
            o
        })
        .collect()
}

/// The brake-publisher controller: on the leader of several servers, keeps the published
/// ConfigMap equal to the brake's objects.
pub struct BrakePublisher {
    store: Arc<dyn Store>,
    clock: SharedClock,
    brake: EvictionBrake,
    /// Whether this server shares its store with others (otherwise it never writes).
    shared: bool,
}

impl BrakePublisher {
    /// A publisher of `brake`; it writes only when `shared`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        brake: EvictionBrake,
        shared: bool,
    ) -> Self {
        Self {
            store,
            clock,
            brake,
            shared,
        }
    }
}

#[async_trait::async_trait]
impl Reconciler for BrakePublisher {
    fn name(&self) -> &'static str {
        "brake-publisher"
    }

    async fn reconcile(&self, _key: &str) -> Result<Action, ReconcileError> {
        if !self.shared {
            return Ok(Action::Done);
        }
        let clusters = cluster_cache::read(self.store.as_ref()).await?;
        let now = self.clock.now();
        let objects = objects_of(&self.brake, &clusters, now);
        let config_maps = well_known::config_maps();
        let stored = match self
            .store
            .get(&config_maps, Some(PUBLISHED_NAMESPACE), PUBLISHED_NAME)
            .await
        {
            Ok(stored) => Some(stored),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let text = published_text(&objects);
        match stored {
            Some(stored) if stored["data"][PUBLISHED_KEY].as_str() == Some(text.as_str()) => {}
            Some(stored) => {
                let mut next = published(&objects, now);
                next["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
                self.store.update(&config_maps, next).await?;
            }
            None => match self
                .store
                .create(&config_maps, published(&objects, now))
                .await
            {
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            },
        }
        Ok(Action::RequeueAfter(PERIOD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn published_objects_read_back_with_their_stamp() {
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap();
        let objects = vec![
            json!({"kind": KIND, "metadata": {"name": "eu"}, "status": {"state": "Normal"}}),
            json!({"kind": KIND, "metadata": {"name": "us"}, "status": {"state": "FullDisruption"}}),
        ];
        let cm = published(&objects, at);
        assert_eq!(cm["metadata"]["name"], PUBLISHED_NAME);
        assert_eq!(cm["metadata"]["namespace"], PUBLISHED_NAMESPACE);
        let back = read_published(&cm);
        assert_eq!(back.len(), 2);
        assert_eq!(back[1]["status"]["state"], "FullDisruption");
        assert_eq!(
            back[0]["metadata"]["annotations"][PUBLISHED_AT_ANNOTATION],
            "2026-01-01T00:00:00.000Z"
        );
        // The text compared is the objects', not the stamp's.
        let later = published(&objects, at + chrono::Duration::seconds(5));
        assert_eq!(cm["data"], later["data"]);
    }

    #[test]
    fn an_unreadable_config_map_publishes_nothing() {
        for cm in [
            json!({}),
            json!({"data": {PUBLISHED_KEY: "not json"}}),
            json!({"data": {PUBLISHED_KEY: "{\"an\": \"object\"}"}}),
        ] {
            assert!(read_published(&cm).is_empty(), "{cm}");
        }
    }

    mod controller {
        use super::*;
        use crate::controllers::runtime::testing::TestWorld;

        async fn published_map(world: &TestWorld) -> Option<Value> {
            world
                .store
                .get(
                    &well_known::config_maps(),
                    Some(PUBLISHED_NAMESPACE),
                    PUBLISHED_NAME,
                )
                .await
                .ok()
        }

        #[tokio::test]
        async fn the_leader_publishes_the_brake_when_it_changes_and_one_server_never() {
            let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap();
            let world = TestWorld::at(t0);
            world
                .cluster(
                    "member1",
                    json!({"syncMode": "Pull", "region": "eu"}),
                    json!({"conditions": [{"type": "Ready", "status": "True"}]}),
                )
                .await;
            let publisher = |shared| {
                BrakePublisher::new(
                    world.store.clone(),
                    world.shared_clock.clone(),
                    world.ctx.brake.clone(),
                    shared,
                )
            };

            // One server alone writes nothing.
            assert_eq!(publisher(false).reconcile(KEY).await.unwrap(), Action::Done);
            assert!(published_map(&world).await.is_none());

            // Shared: the objects the API computes, published; looked at again each second.
            let leader = publisher(true);
            assert_eq!(
                leader.reconcile(KEY).await.unwrap(),
                Action::RequeueAfter(PERIOD)
            );
            let first = published_map(&world).await.unwrap();
            let shown = read_published(&first);
            assert_eq!(shown.len(), 1);
            assert_eq!(shown[0]["metadata"]["name"], "eu");
            assert_eq!(shown[0]["status"]["state"], "StartupGrace");

            // Nothing changed: no write.
            leader.reconcile(KEY).await.unwrap();
            let again = published_map(&world).await.unwrap();
            assert_eq!(
                again["metadata"]["resourceVersion"],
                first["metadata"]["resourceVersion"]
            );

            // The startup grace ends: the new state is published.
            world.clock.advance(chrono::Duration::minutes(10));
            leader.reconcile(KEY).await.unwrap();
            let later = read_published(&published_map(&world).await.unwrap());
            assert_eq!(later[0]["status"]["state"], "Normal");
        }
    }
}
