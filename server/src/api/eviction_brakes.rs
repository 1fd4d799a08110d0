//! `GET /apis/flotilla.io/v1alpha1/evictionbrakes[/<region>]`: the partition brake's state per
//! region (controllers/failover/brake.rs), read-only and computed on read from the clusters
//! as they are now and the brake the controllers share — nothing is stored. One object per
//! region, named after it (`no-region` for the clusters without one); `kubectl get
//! evictionbrakes` prints the state, the rate and the counts, `-o yaml` the reason too. Any
//! other verb answers 405.

use super::computed::ComputedKind;
use super::error::{ApiError, ApiResult};
use super::options::Params;
use super::target::Target;
use super::ApiState;
use crate::controllers::failover::brake::{Pace, RegionReport, NO_REGION};
use crate::controllers::shared::cluster_cache;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use chrono::{DateTime, SecondsFormat, Utc};
use flotilla_api::kinds::{ResourceType, FLOTILLA_GROUP};
use serde_json::{json, Value};

/// The kind's plural.
pub const PLURAL: &str = "evictionbrakes";
/// The kind.
pub const KIND: &str = "EvictionBrake";
/// The object name of the clusters without a region.
pub const NO_REGION_NAME: &str = "no-region";
/// What discovery says the kind allows.
pub const VERBS: &[&str] = &["get", "list"];

/// Whether `r` is this kind.
pub fn is_eviction_brakes(r: &ResourceType) -> bool {
    r.group == FLOTILLA_GROUP && r.plural == PLURAL
}

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
        "rate": v.pace.describe(),
        "clusters": v.counts.clusters,
        "notReadyClusters": v.counts.not_ready,
        "fleetClusters": fleet.0,
        "fleetNotReadyClusters": fleet.1,
        "heldEvictions": r.held,
        "message": v.reason,
    });
    if let Pace::PerSecond(rate) = v.pace {
        status["evictionsPerSecond"] = json!(rate);
    }
    if v.state == crate::controllers::failover::brake::RegionState::StartupGrace {
        status["startupGraceUntil"] = json!(stamp(grace_until));
    }
    json!({
        "apiVersion": format!("{FLOTILLA_GROUP}/v1alpha1"),
        "kind": KIND,
        "metadata": {"name": name, "creationTimestamp": stamp(started)},
        "status": status,
    })
}

/// Every region's object, in region order (none when no controllers run).
pub async fn objects(state: &ApiState) -> ApiResult<Vec<Value>> {
    let Some(brake) = &state.eviction_brake else {
        return Ok(Vec::new());
    };
    let clusters = cluster_cache::read(state.store.as_ref())
        .await
        .map_err(|e| ApiError::from_store(e, FLOTILLA_GROUP, PLURAL))?;
    let now = state.clock.now();
    let view = brake.view(&clusters, now);
    let fleet = (view.fleet.clusters, view.fleet.not_ready);
    Ok(brake
        .report(&clusters, now)
        .iter()
        .map(|r| object(r, fleet, brake.started(), view.grace_until))
        .collect())
}

/// The kind, as the computed kinds are served.
const COMPUTED: ComputedKind = ComputedKind {
    kind: KIND,
    plural: PLURAL,
    read_only_because: "are computed on read",
};

/// Serves the kind: get and list (JSON, YAML or a kubectl Table); anything else is 405.
pub async fn serve(
    state: &ApiState,
    method: &Method,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    COMPUTED.check_read(method, target, params)?;
    let items = objects(state).await?;
    COMPUTED.respond(target.name.as_deref(), items, headers, state.clock.now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::table;
    use crate::controllers::failover::brake::{Counts, RegionState, RegionView};
    use chrono::TimeZone;

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
                reason: "why".into(),
            },
            held: 4,
        };
        let o = object(
            &report("a", RegionState::PartialDisruption, Pace::PerSecond(0.1)),
            (5, 3),
            t0,
            t0,
        );
        assert_eq!(o["metadata"]["name"], "a");
        assert_eq!(o["kind"], "EvictionBrake");
        assert_eq!(o["status"]["state"], "PartialDisruption");
        assert_eq!(o["status"]["rate"], "0.1/s");
        assert_eq!(o["status"]["evictionsPerSecond"], 0.1);
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
        assert!(o["status"].get("evictionsPerSecond").is_none());
        let t = table::table(FLOTILLA_GROUP, KIND, &[o], 0, None, t0);
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
                4,
                "0s",
                "why"
            ])
        );
    }
}
