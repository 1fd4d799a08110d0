//! What the rest of the server may read of the controllers' eviction brake, and how it reaches
//! them: the read-only face [`BrakeReading`] and the [`BrakeSlot`] the controllers put their
//! brake in while they run (always on one server; during its terms as leader when several
//! share an etcd store). The API's `evictionbrakes`, `/metrics` and the failover dry-run read
//! the brake through these alone; nothing outside the controllers holds the live
//! [`EvictionBrake`], so nothing else can admit, hold or forget an eviction.

use crate::controllers::failover::brake::EvictionBrake;
use crate::controllers::failover::brake_publisher::objects_of;
use crate::controllers::settings::BrakeSettings;
use crate::controllers::shared::cluster_cache::Clusters;
use chrono::{DateTime, Utc};
use parking_lot::RwLock;
use serde_json::Value;
use std::sync::Arc;

/// The brake as a reader sees it.
pub trait BrakeReading: Send + Sync {
    /// The `EvictionBrake` objects, one per region in region order, as the brake sees
    /// `clusters` at `now` (its gauges follow the same look).
    fn objects(&self, clusters: &Clusters, now: DateTime<Utc>) -> Vec<Value>;
    /// Brings the brake's gauges to `clusters` at `now`, so a scrape says the state of now,
    /// not of the last eviction.
    fn refresh_gauges(&self, clusters: &Clusters, now: DateTime<Utc>);
    /// The brake's flags.
    fn settings(&self) -> &BrakeSettings;
    /// When the server started (the brake's startup grace counts from it).
    fn started(&self) -> DateTime<Utc>;
}

impl BrakeReading for EvictionBrake {
    fn objects(&self, clusters: &Clusters, now: DateTime<Utc>) -> Vec<Value> {
        objects_of(self, clusters, now)
    }

    fn refresh_gauges(&self, clusters: &Clusters, now: DateTime<Utc>) {
        self.view(clusters, now);
    }

    fn settings(&self) -> &BrakeSettings {
        EvictionBrake::settings(self)
    }

    fn started(&self) -> DateTime<Utc> {
        EvictionBrake::started(self)
    }
}

/// Where the controllers running on this server put their brake for readers: filled when they
/// start, emptied when they stop. Clones share the slot.
#[derive(Clone, Default)]
pub struct BrakeSlot(Arc<RwLock<Option<Arc<dyn BrakeReading>>>>);

impl BrakeSlot {
    /// The controllers started with `brake`.
    pub fn fill(&self, brake: EvictionBrake) {
        *self.0.write() = Some(Arc::new(brake));
    }

    /// The controllers stopped.
    pub fn empty(&self) {
        *self.0.write() = None;
    }

    /// The brake of the controllers running now, if any.
    pub fn current(&self) -> Option<Arc<dyn BrakeReading>> {
        self.0.read().clone()
    }
}
