//! `GET /apis/flotilla.io/v1alpha1/evictionbrakes[/<region>]`: the eviction brake's state per
//! region (controllers/failover/brake.rs), read-only and computed on read from the clusters
//! as they are now and the brake the controllers share — nothing is stored. A server that does
//! not lead (several on one etcd) shows what the leader last published
//! (controllers/failover/brake_publisher.rs), annotated with when. One object per
//! region, named after it (`no-region` for the clusters without one). The brake's unit is a
//! failed cluster: the object says how fast the region lets failed clusters out, which it let
//! out (all their bindings may go) and which wait for their turn, and when. `kubectl get
//! evictionbrakes` prints the state, the rate and the counts, `-o yaml` the reason and the
//! clusters too. Any other verb answers 405 (the registry of computed kinds,
//! [`super`], serves it).

use crate::api::error::{ApiError, ApiResult};
use crate::api::wire::table::{age_column, name_column, text, Column};
use crate::api::ApiState;
use crate::controllers::failover::brake_publisher::{
    read_published, PUBLISHED_NAME, PUBLISHED_NAMESPACE,
};
use crate::controllers::shared::cluster_cache;
use flotilla_api::json_pointer::JsonPointer;
use flotilla_api::kinds::FLOTILLA_GROUP;
use serde_json::{json, Value};

/// The kind's plural.
pub const PLURAL: &str = "evictionbrakes";
pub use crate::controllers::failover::brake_publisher::{object, KIND, NO_REGION_NAME};

/// Every region's object, in region order: computed from the brake of the controllers this
/// server runs, or, on a server that does not lead, the ones the leader published (none when
/// nothing was published).
pub async fn objects(state: &ApiState) -> ApiResult<Vec<Value>> {
    let store_error = |e| ApiError::from_store(e, FLOTILLA_GROUP, PLURAL);
    let Some(brake) = &state.brake() else {
        let config_maps = flotilla_api::kinds::well_known::config_maps();
        return match state
            .store
            .get(&config_maps, Some(PUBLISHED_NAMESPACE), PUBLISHED_NAME)
            .await
        {
            Ok(published) => Ok(read_published(&published)),
            Err(crate::store::StoreError::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(store_error(e)),
        };
    };
    let clusters = cluster_cache::read(state.store.as_ref())
        .await
        .map_err(store_error)?;
    Ok(brake.objects(&clusters, state.clock.now()))
}

/// The columns of `kubectl get evictionbrakes`: the state, the rate and the counts (the
/// reason with `-o wide`).
pub fn columns() -> Vec<Column> {
    fn count(o: &Value, pointer: &str) -> Value {
        json!(o.lookup(pointer).and_then(Value::as_u64).unwrap_or(0))
    }
    fn len(o: &Value, pointer: &str) -> Value {
        json!(o
            .lookup(pointer)
            .and_then(Value::as_array)
            .map_or(0, Vec::len))
    }
    let mut out = vec![name_column()];
    out.push(Column {
        name: "State",
        kind: "string",
        priority: 0,
        description: "Normal, PartialDisruption, FullDisruption or StartupGrace.",
        cell: |o, _| text(o, "/status/state"),
    });
    out.push(Column {
        name: "Rate",
        kind: "string",
        priority: 0,
        description: "Failed clusters the brake lets out in the region now; once out, all their bindings may go.",
        cell: |o, _| text(o, "/status/rate"),
    });
    out.push(Column {
        name: "Clusters",
        kind: "integer",
        priority: 0,
        description: "Clusters of the region.",
        cell: |o, _| count(o, "/status/clusters"),
    });
    out.push(Column {
        name: "Not-Ready",
        kind: "integer",
        priority: 0,
        description: "Clusters of the region that are not Ready.",
        cell: |o, _| count(o, "/status/notReadyClusters"),
    });
    out.push(Column {
        name: "Released",
        kind: "integer",
        priority: 0,
        description: "Failed clusters let out: all their bindings may be evicted.",
        cell: |o, _| len(o, "/status/releasedClusters"),
    });
    out.push(Column {
        name: "Queued",
        kind: "integer",
        priority: 0,
        description: "Failed clusters waiting for their turn.",
        cell: |o, _| len(o, "/status/queuedClusters"),
    });
    out.push(Column {
        name: "Held",
        kind: "integer",
        priority: 0,
        description: "Evictions the brake made wait since the server started.",
        cell: |o, _| count(o, "/status/heldEvictions"),
    });
    out.push(age_column());
    out.push(Column {
        name: "Message",
        kind: "string",
        priority: 1,
        description: "Why the region is in its state.",
        cell: |o, _| text(o, "/status/message"),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::wire::table;
    use crate::controllers::failover::brake::{
        ClusterTurn, Counts, Pace, RegionReport, RegionState, RegionView, NO_REGION,
    };
    use chrono::{TimeZone, Utc};

    #[test]
    fn an_object_per_region_says_state_rate_and_counts() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap();
        let report = |region: &str, state, pace| RegionReport {
            view: RegionView {
                region: region.into(),
                counts: Counts {
                    clusters: 3,
                    not_ready: 3,
                },
                state,
                pace,
                ceiling: None,
                reason: "why".into(),
            },
            held: 4,
            released: vec![ClusterTurn {
                cluster: "a1".into(),
                at: t0,
            }],
            queued: vec![ClusterTurn {
                cluster: "a2".into(),
                at: t0 + chrono::Duration::seconds(100),
            }],
        };
        let o = object(
            &report("a", RegionState::PartialDisruption, Pace::PerSecond(0.01)),
            (5, 3),
            t0,
            t0,
        );
        assert_eq!(o["metadata"]["name"], "a");
        assert_eq!(o["kind"], "EvictionBrake");
        assert_eq!(o["status"]["state"], "PartialDisruption");
        assert_eq!(o["status"]["rate"], "0.01 clusters/s");
        assert_eq!(o["status"]["clustersPerSecond"], 0.01);
        assert_eq!(
            o["status"]["releasedClusters"],
            json!([{"name": "a1", "releasedAt": "2026-01-01T00:00:00Z"}])
        );
        assert_eq!(
            o["status"]["queuedClusters"],
            json!([{"name": "a2", "turnAt": "2026-01-01T00:01:40Z"}])
        );
        assert!(o["status"].get("resourceEvictionRate").is_none());
        assert_eq!(o["status"]["notReadyClusters"], 3);
        assert_eq!(o["status"]["fleetClusters"], 5);
        assert_eq!(o["status"]["heldEvictions"], 4);
        assert!(o["status"].get("startupGraceUntil").is_none());
        let o = object(
            &report(NO_REGION, RegionState::StartupGrace, Pace::Stopped),
            (3, 3),
            t0,
            t0 + chrono::Duration::seconds(40),
        );
        assert_eq!(o["metadata"]["name"], NO_REGION_NAME);
        assert_eq!(o["status"]["region"], NO_REGION);
        assert_eq!(o["status"]["rate"], "stopped");
        assert_eq!(o["status"]["startupGraceUntil"], "2026-01-01T00:00:40Z");
        assert!(o["status"].get("clustersPerSecond").is_none());
        let t = table::render(&columns(), &[o], 0, None, t0);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "State",
                "Rate",
                "Clusters",
                "Not-Ready",
                "Released",
                "Queued",
                "Held",
                "Age",
                "Message"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                NO_REGION_NAME,
                "StartupGrace",
                "stopped",
                3,
                3,
                1,
                1,
                4,
                "0s",
                "why"
            ])
        );
    }
}
