//! The partition brake: every eviction of a (binding, cluster), whichever controller produces
//! it (taint manager, application failover), asks this brake first. It exists because a
//! control plane cut off from its members sees them all "not Ready" at once, and must not
//! evict the whole fleet (karmada-io/karmada#5150); Kubernetes' node lifecycle controller
//! solved the same problem for nodes with zone states, which this module follows for
//! clusters grouped by `spec.region`.
//!
//! The rule, as pure functions of (each cluster's region and Ready, the flags, the server's
//! start, now) — [`fleet_view`], [`state_of`], [`pace_of`]:
//! - **StartupGrace**: for one `--cluster-monitor-grace-period` after the server started,
//!   nothing is evicted (the Ready conditions read at start may be stale).
//! - **FullDisruption**: every cluster of the fleet is not Ready, or more than
//!   `--large-fleet-partition-threshold` (0.7) of a fleet of at least `--large-fleet-size`
//!   (10) clusters: evictions stop everywhere.
//! - **PartialDisruption**: more than `--unhealthy-cluster-threshold` (0.55) of the region's
//!   clusters, or of the whole fleet, are not Ready, and at least
//!   [`MIN_NOT_READY_FOR_DISRUPTION`] of them: evictions in the region are paced at
//!   `--secondary-resource-eviction-rate` (0.1/s).
//! - **Normal**: paced at `--resource-eviction-rate` (0.5/s, Karmada's default).
//!
//! Small regions: as Kubernetes does for zones (a zone is partially disrupted only with more
//! than two not-Ready nodes), one or two failed clusters are never read as a partition, so
//! a region of one or two clusters that fails is failed over at the normal rate; the
//! fleet-wide rules still stop a control plane that lost every member.
//!
//! A rate of 0 (either flag) stops evictions in that state, as Karmada's 0 (one item per
//! 1800 s) nearly does; `--enable-eviction-rate-limit=false` turns pacing off (the stops of
//! StartupGrace and FullDisruption stay), and `--eviction-startup-grace-period` sets the
//! startup wait apart from the monitor grace period (0s: none).
//!
//! The shared part is [`EvictionBrake`]: per region one [`TokenBucket`] (burst 1, as
//! Kubernetes' eviction limiter), replaced when the region's rate changes (a new bucket holds
//! its one token, as Kubernetes' swapped limiters do). The buckets run on the server's
//! injected clock, so tests drive them with a fake one. It lives in the
//! controller context, so both producers draw from the same buckets, and the API reads it for
//! `kubectl get evictionbrakes`. When the brake says wait, a producer writes nothing and
//! requeues after the time the brake says.

use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::runtime::limiter::{Rate, TokenBucket};
use crate::controllers::settings::BrakeSettings;
use crate::controllers::shared::cluster_cache::Clusters;
use crate::events::{EventRecorder, EventType};
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The group of clusters without a region, as the brake names it.
pub const NO_REGION: &str = "(none)";
/// A region (or the fleet) is only partially disrupted with at least this many clusters not
/// Ready: one or two failures are failures, not a partition (Kubernetes' zones need three).
pub const MIN_NOT_READY_FOR_DISRUPTION: usize = 3;
/// How soon a producer looks again at an eviction the brake stopped (FullDisruption, rate
/// 0); cluster changes wake the taint manager sooner (Karmada's taint manager retries every
/// 10 s too).
pub const STOPPED_RETRY: Duration = Duration::from_secs(10);
/// A reserved token nobody came back for this long after it was due is given up.
const STALE_RESERVATION: Duration = Duration::from_secs(60);

/// The state of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RegionState {
    /// Evictions at the primary rate.
    Normal,
    /// Too many clusters not Ready: evictions at the secondary rate.
    PartialDisruption,
    /// The fleet looks cut off: no evictions.
    FullDisruption,
    /// The server started less than a grace period ago: no evictions yet.
    StartupGrace,
}

impl RegionState {
    /// Every state, in the order the metric lists them.
    pub const ALL: [RegionState; 4] = [
        RegionState::Normal,
        RegionState::PartialDisruption,
        RegionState::FullDisruption,
        RegionState::StartupGrace,
    ];

    /// The name the API and the metric use.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionState::Normal => "Normal",
            RegionState::PartialDisruption => "PartialDisruption",
            RegionState::FullDisruption => "FullDisruption",
            RegionState::StartupGrace => "StartupGrace",
        }
    }
}

/// How fast evictions may go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// Pacing is off.
    Unlimited,
    /// At most this many per second (> 0), burst 1.
    PerSecond(f64),
    /// None.
    Stopped,
}

impl Pace {
    /// Per second, for the metric and the API (+Inf when unlimited).
    pub fn per_second(self) -> f64 {
        match self {
            Pace::Unlimited => f64::INFINITY,
            Pace::PerSecond(r) => r,
            Pace::Stopped => 0.0,
        }
    }

    /// `0.5/s`, `unlimited`, `stopped`.
    pub fn describe(self) -> String {
        match self {
            Pace::Unlimited => "unlimited".into(),
            Pace::PerSecond(r) => format!("{r}/s"),
            Pace::Stopped => "stopped".into(),
        }
    }
}

/// One cluster as the brake sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// Its `spec.region` (empty: none).
    pub region: &'a str,
    /// Whether its Ready condition is True.
    pub ready: bool,
}

/// Clusters and not-Ready clusters of a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Clusters.
    pub clusters: usize,
    /// Of which not Ready (False, Unknown or no condition).
    pub not_ready: usize,
}

impl Counts {
    fn share(self) -> f64 {
        if self.clusters == 0 {
            0.0
        } else {
            self.not_ready as f64 / self.clusters as f64
        }
    }
}

/// The brake's verdict for one region.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionView {
    /// The region ([`NO_REGION`] for clusters without one).
    pub region: String,
    /// Its clusters.
    pub counts: Counts,
    /// Its state.
    pub state: RegionState,
    /// How fast it may evict.
    pub pace: Pace,
    /// Why, in a sentence (stable while the situation lasts, so repeated Events fold).
    pub reason: String,
}

/// The brake's verdict for the fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetView {
    /// All clusters.
    pub fleet: Counts,
    /// When the startup grace ends.
    pub grace_until: DateTime<Utc>,
    /// Per region (by the brake's region name).
    pub regions: BTreeMap<String, RegionView>,
    /// The verdict for a region without clusters (the fleet's rules alone).
    pub empty: RegionView,
}

impl FleetView {
    /// The verdict for `region` (a region with no cluster any more gets the fleet's rules).
    pub fn region(&self, region: &str) -> RegionView {
        self.regions
            .get(region)
            .cloned()
            .unwrap_or_else(|| RegionView {
                region: region.to_string(),
                ..self.empty.clone()
            })
    }
}

/// The brake's name of a cluster's region.
pub fn region_name(region: &str) -> &str {
    if region.is_empty() {
        NO_REGION
    } else {
        region
    }
}

fn percent(share: f64) -> String {
    format!("{}%", (share * 100.0).round())
}

/// The state of the region `name` with `region` counts in a fleet with `fleet` counts at
/// `now`, and why.
pub fn state_of(
    region: Counts,
    fleet: Counts,
    grace_until: DateTime<Utc>,
    name: &str,
    settings: &BrakeSettings,
    now: DateTime<Utc>,
) -> (RegionState, String) {
    if now < grace_until {
        return (
            RegionState::StartupGrace,
            format!(
                "the server started less than {} ago: evictions wait until {} (Ready conditions read at a start may be stale)",
                humantime::format_duration(settings.startup_grace),
                grace_until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
    }
    if fleet.clusters > 0 && fleet.not_ready == fleet.clusters {
        return (
            RegionState::FullDisruption,
            format!(
                "all {} clusters of the fleet are not Ready: a control plane cut off from its members must not evict them all; evictions resume when a cluster is Ready again",
                fleet.clusters
            ),
        );
    }
    if fleet.clusters >= settings.large_fleet_size.max(1)
        && fleet.share() > settings.large_fleet_threshold
    {
        return (
            RegionState::FullDisruption,
            format!(
                "{} of {} clusters of the fleet are not Ready, more than {} of a fleet of at least {}: evictions stop until fewer are",
                fleet.not_ready,
                fleet.clusters,
                percent(settings.large_fleet_threshold),
                settings.large_fleet_size
            ),
        );
    }
    let disrupted = |c: Counts| {
        c.not_ready >= MIN_NOT_READY_FOR_DISRUPTION && c.share() > settings.unhealthy_threshold
    };
    if disrupted(region) {
        return (
            RegionState::PartialDisruption,
            format!(
                "{} of {} clusters of region {name} are not Ready (more than {})",
                region.not_ready,
                region.clusters,
                percent(settings.unhealthy_threshold)
            ),
        );
    }
    if disrupted(fleet) {
        return (
            RegionState::PartialDisruption,
            format!(
                "{} of {} clusters of the fleet are not Ready (more than {})",
                fleet.not_ready,
                fleet.clusters,
                percent(settings.unhealthy_threshold)
            ),
        );
    }
    (
        RegionState::Normal,
        format!(
            "{} of {} clusters of region {name} are not Ready",
            region.not_ready, region.clusters
        ),
    )
}

/// How fast a region in `state` may evict.
pub fn pace_of(state: RegionState, settings: &BrakeSettings) -> Pace {
    let rate = match state {
        RegionState::StartupGrace | RegionState::FullDisruption => return Pace::Stopped,
        RegionState::Normal => settings.primary_rate,
        RegionState::PartialDisruption => settings.secondary_rate,
    };
    if !settings.rate_limit {
        Pace::Unlimited
    } else if rate.is_finite() && rate > 0.0 {
        Pace::PerSecond(rate)
    } else {
        Pace::Stopped
    }
}

/// The state of every region of the fleet `members` at `now`, for a server started at
/// `started`.
pub fn fleet_view<'a>(
    members: impl IntoIterator<Item = Member<'a>>,
    settings: &BrakeSettings,
    started: DateTime<Utc>,
    now: DateTime<Utc>,
) -> FleetView {
    let mut fleet = Counts::default();
    let mut per_region: BTreeMap<String, Counts> = BTreeMap::new();
    for m in members {
        let c = per_region
            .entry(region_name(m.region).to_string())
            .or_default();
        c.clusters += 1;
        fleet.clusters += 1;
        if !m.ready {
            c.not_ready += 1;
            fleet.not_ready += 1;
        }
    }
    let grace_until = started
        + chrono::Duration::from_std(settings.startup_grace).unwrap_or(chrono::Duration::MAX);
    let verdict = |name: &str, counts: Counts| {
        let (state, reason) = state_of(counts, fleet, grace_until, name, settings, now);
        RegionView {
            region: name.to_string(),
            counts,
            state,
            pace: pace_of(state, settings),
            reason,
        }
    };
    let regions = per_region
        .into_iter()
        .map(|(name, counts)| (name.clone(), verdict(&name, counts)))
        .collect();
    FleetView {
        fleet,
        grace_until,
        regions,
        empty: verdict("", Counts::default()),
    }
}

/// Why the brake made an eviction wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldReason {
    /// The region's rate allows the next eviction later.
    RateLimited,
    /// The server started less than a grace period ago.
    StartupGrace,
    /// The fleet looks cut off.
    FullDisruption,
    /// The region's rate is 0.
    RateZero,
}

impl HoldReason {
    /// The name the metric uses.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::RateLimited => "RateLimited",
            HoldReason::StartupGrace => "StartupGrace",
            HoldReason::FullDisruption => "FullDisruption",
            HoldReason::RateZero => "RateZero",
        }
    }

    /// Whether evictions stopped (an Event says so) rather than being paced.
    pub fn stops(self) -> bool {
        !matches!(self, HoldReason::RateLimited)
    }
}

/// An eviction the brake made wait.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The evicted cluster's region (brake name).
    pub region: String,
    /// Why.
    pub reason: HoldReason,
    /// Ask again after this long.
    pub wait: Duration,
    /// The region's state, in a sentence.
    pub message: String,
}

impl Hold {
    /// The Event message for holding the eviction from `cluster` (stable while the situation
    /// lasts, so repeats fold into one Event with a count).
    pub fn event_message(&self, cluster: &str) -> String {
        format!(
            "Eviction from cluster {cluster} is held by the eviction brake ({} in region {}): {}",
            self.reason.as_str(),
            self.region,
            self.message
        )
    }
}

/// Decides for one eviction in a region from the region's verdict, given what the region's
/// bucket answers when asked (`take`: `Ok` a token was taken, `Err(wait)` none until then).
pub fn admit_in(
    view: &RegionView,
    grace_until: DateTime<Utc>,
    now: DateTime<Utc>,
    take: impl FnOnce(f64) -> Result<(), Duration>,
) -> Result<(), Hold> {
    let hold = |reason, wait| Hold {
        region: view.region.clone(),
        reason,
        wait,
        message: view.reason.clone(),
    };
    match (view.state, view.pace) {
        (RegionState::StartupGrace, _) => {
            let wait = (grace_until - now).to_std().unwrap_or(Duration::ZERO);
            Err(hold(
                HoldReason::StartupGrace,
                wait.max(Duration::from_millis(1)),
            ))
        }
        (RegionState::FullDisruption, _) => Err(hold(HoldReason::FullDisruption, STOPPED_RETRY)),
        (_, Pace::Stopped) => Err(hold(HoldReason::RateZero, STOPPED_RETRY)),
        (_, Pace::Unlimited) => Ok(()),
        (_, Pace::PerSecond(rate)) => {
            take(rate).map_err(|wait| hold(HoldReason::RateLimited, wait))
        }
    }
}

/// What the API shows of one region.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionReport {
    /// The verdict.
    pub view: RegionView,
    /// Evictions held in the region since the server started.
    pub held: u64,
}

struct Inner {
    settings: BrakeSettings,
    started: DateTime<Utc>,
    /// The wall-clock instant `epoch.0` is the bucket clock's `epoch.1`: buckets run on the
    /// server's (injected) clock.
    epoch: (DateTime<Utc>, Instant),
    buckets: Mutex<BTreeMap<String, (f64, TokenBucket)>>,
    /// Paced evictions waiting for the token reserved for them, by ticket (binding and
    /// cluster), with when it is due: each waiter is admitted at its own time, so a thousand
    /// held evictions are not all woken for every token.
    reservations: Mutex<std::collections::HashMap<String, Instant>>,
    /// The stop last told (as an Event) per ticket, so a stop is told once, not on every
    /// look while it lasts; forgotten when the eviction goes.
    told: Mutex<std::collections::HashMap<String, String>>,
    held: Mutex<BTreeMap<String, u64>>,
    metrics: Option<FailoverMetrics>,
}

/// The brake every eviction asks. Cheap to clone; clones share the buckets.
#[derive(Clone)]
pub struct EvictionBrake {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EvictionBrake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictionBrake")
            .field("settings", &self.inner.settings)
            .field("started", &self.inner.started)
            .finish_non_exhaustive()
    }
}

impl EvictionBrake {
    /// A brake for a server started at `started` (the startup grace counts from it).
    pub fn new(
        settings: BrakeSettings,
        started: DateTime<Utc>,
        metrics: Option<FailoverMetrics>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                started,
                epoch: (started, Instant::now()),
                buckets: Mutex::new(BTreeMap::new()),
                reservations: Mutex::new(std::collections::HashMap::new()),
                told: Mutex::new(std::collections::HashMap::new()),
                held: Mutex::new(BTreeMap::new()),
                metrics,
            }),
        }
    }

    /// The flags.
    pub fn settings(&self) -> &BrakeSettings {
        &self.inner.settings
    }

    /// When the server started.
    pub fn started(&self) -> DateTime<Utc> {
        self.inner.started
    }

    /// The verdict for `clusters` at `now` (also published as metrics).
    pub fn view(&self, clusters: &Clusters, now: DateTime<Utc>) -> FleetView {
        let view = fleet_view(
            clusters.by_name.values().map(|c| Member {
                region: &c.spec.region,
                ready: c.is_ready(),
            }),
            &self.inner.settings,
            self.inner.started,
            now,
        );
        self.publish(&view);
        view
    }

    /// The region (brake name) of `cluster` (a cluster that is gone counts as region-less).
    pub fn region_of<'c>(clusters: &'c Clusters, cluster: &str) -> &'c str {
        region_name(
            clusters
                .by_name
                .get(cluster)
                .map_or("", |c| c.spec.region.as_str()),
        )
    }

    /// Asks for one eviction (`ticket`: which binding from which cluster) from a cluster of
    /// `region` at `now`: `Ok` it may go (a token was taken), `Err` it must wait and nothing
    /// may be written. A paced eviction that must wait has the next token reserved for it
    /// and is admitted when it asks again at or after the wait it was given.
    pub fn admit(
        &self,
        view: &FleetView,
        region: &str,
        ticket: &str,
        now: DateTime<Utc>,
    ) -> Result<(), Hold> {
        let region_view = view.region(region);
        let at = self.instant(now);
        let result = admit_in(&region_view, view.grace_until, now, |rate| {
            let mut reservations = self.inner.reservations.lock();
            if let Some(&due) = reservations.get(ticket) {
                return if at >= due {
                    reservations.remove(ticket);
                    Ok(())
                } else {
                    Err(due - at)
                };
            }
            // Reservations nobody came back for (the eviction was no longer needed) go.
            reservations.retain(|_, due| at.saturating_duration_since(*due) < STALE_RESERVATION);
            let mut buckets = self.inner.buckets.lock();
            let entry = buckets
                .entry(region_view.region.clone())
                .or_insert_with(|| {
                    (
                        rate,
                        TokenBucket::new_at(
                            Rate {
                                per_second: rate,
                                burst: 1,
                            },
                            at,
                        ),
                    )
                });
            if entry.0 != rate {
                // The region changed state: a bucket at the new rate.
                *entry = (
                    rate,
                    TokenBucket::new_at(
                        Rate {
                            per_second: rate,
                            burst: 1,
                        },
                        at,
                    ),
                );
            }
            match entry.1.reserve_at(at) {
                Duration::ZERO => Ok(()),
                wait => {
                    reservations.insert(ticket.to_string(), at + wait);
                    Err(wait)
                }
            }
        });
        if result.is_ok() {
            self.inner.told.lock().remove(ticket);
        }
        if let Err(hold) = &result {
            *self
                .inner
                .held
                .lock()
                .entry(hold.region.clone())
                .or_default() += 1;
            if let Some(m) = &self.inner.metrics {
                m.evictions_held
                    .with_label_values(&[hold.region.as_str(), hold.reason.as_str()])
                    .inc();
            }
            tracing::debug!(region = %hold.region, reason = hold.reason.as_str(), wait_ms = hold.wait.as_millis() as u64, "eviction held by the brake");
        }
        result
    }

    /// Whether the stop `message` is news for `ticket` (not told since it was last held
    /// or admitted); remembers it.
    pub fn tell_once(&self, ticket: &str, message: &str) -> bool {
        let mut told = self.inner.told.lock();
        if told.get(ticket).is_some_and(|m| m == message) {
            return false;
        }
        told.insert(ticket.to_string(), message.to_string());
        true
    }

    /// Every region's verdict and held count, for the API.
    pub fn report(&self, clusters: &Clusters, now: DateTime<Utc>) -> Vec<RegionReport> {
        let view = self.view(clusters, now);
        let held = self.inner.held.lock().clone();
        view.regions
            .into_values()
            .map(|v| RegionReport {
                held: held.get(&v.region).copied().unwrap_or(0),
                view: v,
            })
            .collect()
    }

    fn instant(&self, now: DateTime<Utc>) -> Instant {
        let (wall, mono) = self.inner.epoch;
        mono + (now - wall).to_std().unwrap_or(Duration::ZERO)
    }

    fn publish(&self, view: &FleetView) {
        let Some(m) = &self.inner.metrics else {
            return;
        };
        for (name, r) in &view.regions {
            for s in RegionState::ALL {
                m.brake_state
                    .with_label_values(&[name.as_str(), s.as_str()])
                    .set(i64::from(s == r.state));
            }
            m.brake_rate
                .with_label_values(&[name.as_str()])
                .set(r.pace.per_second());
        }
    }
}

/// Names one eviction: which binding from which cluster.
fn ticket_of(binding: &str, cluster: &str) -> String {
    format!("{binding}@{cluster}")
}

/// The reason of the Event on a binding whose eviction the brake stopped.
pub const EVENT_EVICTION_HELD: &str = "EvictionHeld";

/// Asks `brake` (none: everything goes) for the eviction of one binding from each of
/// `clusters_evicted` at `now`, in order; answers the ones that must wait. Each one that may
/// go has taken its token.
pub fn hold_back<'c>(
    brake: Option<&EvictionBrake>,
    clusters: &Clusters,
    binding: &str,
    clusters_evicted: impl IntoIterator<Item = &'c str>,
    now: DateTime<Utc>,
) -> BTreeMap<String, Hold> {
    let mut held = BTreeMap::new();
    let Some(brake) = brake else {
        return held;
    };
    let mut view = None;
    for cluster in clusters_evicted {
        let view = view.get_or_insert_with(|| brake.view(clusters, now));
        let ticket = ticket_of(binding, cluster);
        let region = EvictionBrake::region_of(clusters, cluster);
        if let Err(h) = brake.admit(view, region, &ticket, now) {
            held.insert(cluster.to_string(), h);
        }
    }
    held
}

/// The earliest wait of `held`, with `other` (when to look again).
pub fn earliest(other: Option<Duration>, held: &BTreeMap<String, Hold>) -> Option<Duration> {
    held.values().map(|h| h.wait).chain(other).min()
}

/// Records, on `binding`, an Event for each eviction the brake stopped (paced ones only
/// wait, and the metric counts them); repeats fold into one Event with a count.
pub async fn report_stops(
    brake: Option<&EvictionBrake>,
    events: &EventRecorder,
    binding: &serde_json::Value,
    key: &str,
    held: &BTreeMap<String, Hold>,
) {
    for (cluster, h) in held {
        if !h.reason.stops() {
            continue;
        }
        // Told once per stop: a binding looked at again while the fleet stays down does not
        // write its Event again every few seconds.
        let message = h.event_message(cluster);
        if brake.is_some_and(|b| !b.tell_once(&ticket_of(key, cluster), &message)) {
            continue;
        }
        tracing::info!(binding = key, cluster = %cluster, region = %h.region, reason = h.reason.as_str(), "eviction held by the eviction brake");
        events
            .record(binding, EventType::Warning, EVENT_EVICTION_HELD, &message)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .unwrap_or_default()
    }

    /// `spec`: per region, (clusters, not Ready).
    fn fleet(spec: &[(&'static str, usize, usize)]) -> Vec<Member<'static>> {
        spec.iter()
            .flat_map(|&(region, n, down)| {
                (0..n).map(move |i| Member {
                    region,
                    ready: i >= down,
                })
            })
            .collect()
    }

    fn settings() -> BrakeSettings {
        BrakeSettings {
            startup_grace: Duration::from_secs(40),
            ..BrakeSettings::default()
        }
    }

    #[test]
    fn region_states_follow_the_node_lifecycle_rules() {
        use RegionState::*;
        let s = settings();
        // (case, fleet, seconds after start, expected (region, state, pace))
        #[allow(clippy::type_complexity)]
        let table: Vec<(
            &str,
            Vec<(&'static str, usize, usize)>,
            i64,
            Vec<(&str, RegionState, Pace)>,
        )> = vec![
            (
                "healthy fleet",
                vec![("a", 3, 0), ("b", 2, 0)],
                100,
                vec![
                    ("a", Normal, Pace::PerSecond(0.5)),
                    ("b", Normal, Pace::PerSecond(0.5)),
                ],
            ),
            (
                "one region over the threshold",
                vec![("a", 4, 3), ("b", 6, 0)],
                100,
                vec![
                    ("a", PartialDisruption, Pace::PerSecond(0.1)),
                    ("b", Normal, Pace::PerSecond(0.5)),
                ],
            ),
            (
                "a region at the threshold (11 of 20 = 55%) is not over it",
                vec![("a", 20, 11), ("b", 20, 0)],
                100,
                vec![
                    ("a", Normal, Pace::PerSecond(0.5)),
                    ("b", Normal, Pace::PerSecond(0.5)),
                ],
            ),
            (
                "12 of 20 is over it",
                vec![("a", 20, 12), ("b", 20, 0)],
                100,
                vec![
                    ("a", PartialDisruption, Pace::PerSecond(0.1)),
                    ("b", Normal, Pace::PerSecond(0.5)),
                ],
            ),
            (
                "the whole fleet over the threshold slows every region",
                vec![("a", 3, 3), ("b", 2, 0)],
                100,
                vec![
                    ("a", PartialDisruption, Pace::PerSecond(0.1)),
                    ("b", PartialDisruption, Pace::PerSecond(0.1)),
                ],
            ),
            (
                "small region: two clusters down is a failure, not a partition",
                vec![("a", 3, 0), ("b", 2, 2), ("c", 3, 0)],
                100,
                vec![
                    ("a", Normal, Pace::PerSecond(0.5)),
                    ("b", Normal, Pace::PerSecond(0.5)),
                    ("c", Normal, Pace::PerSecond(0.5)),
                ],
            ),
            (
                "whole fleet down: stop",
                vec![("a", 3, 3), ("b", 2, 2)],
                100,
                vec![
                    ("a", FullDisruption, Pace::Stopped),
                    ("b", FullDisruption, Pace::Stopped),
                ],
            ),
            (
                "one lone cluster down is the whole fleet",
                vec![("", 1, 1)],
                100,
                vec![(NO_REGION, FullDisruption, Pace::Stopped)],
            ),
            (
                "a large fleet mostly down: stop",
                vec![("a", 6, 6), ("b", 6, 3)],
                100,
                vec![
                    ("a", FullDisruption, Pace::Stopped),
                    ("b", FullDisruption, Pace::Stopped),
                ],
            ),
            (
                "a small fleet mostly down only slows",
                vec![("a", 4, 4), ("b", 4, 2)],
                100,
                vec![
                    ("a", PartialDisruption, Pace::PerSecond(0.1)),
                    ("b", PartialDisruption, Pace::PerSecond(0.1)),
                ],
            ),
            (
                "restart grace: nothing, whatever the fleet",
                vec![("a", 3, 0), ("", 2, 2)],
                39,
                vec![
                    ("a", StartupGrace, Pace::Stopped),
                    (NO_REGION, StartupGrace, Pace::Stopped),
                ],
            ),
            (
                "the grace ends after one grace period",
                vec![("a", 3, 0)],
                40,
                vec![("a", Normal, Pace::PerSecond(0.5))],
            ),
        ];
        for (case, spec, after, want) in table {
            let v = fleet_view(fleet(&spec), &s, at(0), at(after));
            let got: Vec<(&str, RegionState, Pace)> = v
                .regions
                .values()
                .map(|r| (r.region.as_str(), r.state, r.pace))
                .collect();
            let mut want = want;
            want.sort_by(|a, b| a.0.cmp(b.0));
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn pace_follows_the_flags() {
        use RegionState::*;
        let s = settings();
        let off = BrakeSettings {
            rate_limit: false,
            ..settings()
        };
        let zero = BrakeSettings {
            primary_rate: 0.0,
            ..settings()
        };
        let table = [
            (&s, Normal, Pace::PerSecond(0.5)),
            (&s, PartialDisruption, Pace::PerSecond(0.1)),
            (&s, FullDisruption, Pace::Stopped),
            (&s, StartupGrace, Pace::Stopped),
            (&off, Normal, Pace::Unlimited),
            (&off, PartialDisruption, Pace::Unlimited),
            (&off, FullDisruption, Pace::Stopped),
            (&off, StartupGrace, Pace::Stopped),
            (&zero, Normal, Pace::Stopped),
            (&zero, PartialDisruption, Pace::PerSecond(0.1)),
        ];
        for (settings, state, want) in table {
            assert_eq!(pace_of(state, settings), want, "{state:?} {settings:?}");
        }
    }

    #[test]
    fn the_reason_names_the_counts_and_stays_the_same_while_they_do() {
        let s = settings();
        let v = fleet_view(fleet(&[("a", 3, 3), ("b", 2, 2)]), &s, at(0), at(100));
        let a = v.region("a");
        assert!(
            a.reason
                .contains("all 5 clusters of the fleet are not Ready"),
            "{}",
            a.reason
        );
        let later = fleet_view(fleet(&[("a", 3, 3), ("b", 2, 2)]), &s, at(0), at(200));
        assert_eq!(later.region("a").reason, a.reason);
        let p = fleet_view(fleet(&[("a", 3, 3), ("b", 3, 0)]), &s, at(0), at(100));
        assert_eq!(
            p.region("a").reason,
            "3 of 3 clusters of region a are not Ready (more than 55%)"
        );
        // A region the fleet no longer has: the fleet's rules still hold.
        assert_eq!(v.region("gone").state, RegionState::FullDisruption);
        assert_eq!(p.region("gone").state, RegionState::Normal);
    }

    #[test]
    fn admission_per_state() {
        let s = settings();
        let grace = at(40);
        let view = |spec: &[(&'static str, usize, usize)], after| {
            fleet_view(fleet(spec), &s, at(0), at(after))
        };
        let never = |_| -> Result<(), Duration> { panic!("no bucket for a stop") };
        // StartupGrace: wait until the grace ends.
        let v = view(&[("a", 3, 3)], 30);
        let h = admit_in(&v.region("a"), grace, at(30), never).unwrap_err();
        assert_eq!(
            (h.reason, h.wait),
            (HoldReason::StartupGrace, Duration::from_secs(10))
        );
        // FullDisruption: look again after the retry.
        let v = view(&[("a", 3, 3)], 100);
        let h = admit_in(&v.region("a"), grace, at(100), never).unwrap_err();
        assert_eq!(
            (h.reason, h.wait),
            (HoldReason::FullDisruption, STOPPED_RETRY)
        );
        assert!(h.reason.stops());
        // Paced: the bucket decides, at the region's rate.
        let v = view(&[("a", 3, 3), ("b", 3, 0)], 100);
        let mut asked = None;
        let h = admit_in(&v.region("a"), grace, at(100), |r| {
            asked = Some(r);
            Err(Duration::from_secs(7))
        })
        .unwrap_err();
        assert_eq!(asked, Some(0.1));
        assert_eq!(
            (h.reason, h.wait),
            (HoldReason::RateLimited, Duration::from_secs(7))
        );
        assert!(!h.reason.stops());
        assert!(admit_in(&v.region("b"), grace, at(100), |r| {
            assert_eq!(r, 0.5);
            Ok(())
        })
        .is_ok());
        // Pacing off: no bucket at all.
        let off = BrakeSettings {
            rate_limit: false,
            ..settings()
        };
        let v = fleet_view(fleet(&[("a", 3, 1)]), &off, at(0), at(100));
        assert!(admit_in(&v.region("a"), grace, at(100), never).is_ok());
    }

    mod shared {
        use super::*;
        use flotilla_api::cluster::Cluster;

        fn clusters(spec: &[(&str, &str, bool)]) -> Clusters {
            let by_name = spec
                .iter()
                .map(|&(name, region, ready)| {
                    let status = if ready { "True" } else { "Unknown" };
                    let c: Cluster = serde_json::from_value(serde_json::json!({
                        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                        "metadata": {"name": name},
                        "spec": {"syncMode": "Pull", "region": region},
                        "status": {"conditions": [{"type": "Ready", "status": status,
                            "reason": "r", "message": "", "lastTransitionTime": "2023-11-14T22:13:20Z"}]}
                    }))
                    .unwrap();
                    (name.to_string(), c)
                })
                .collect();
            Clusters {
                by_name,
                ..Default::default()
            }
        }

        #[tokio::test]
        async fn one_bucket_per_region_shared_by_clones_at_the_states_rate() {
            let registry = prometheus::Registry::new();
            let metrics = FailoverMetrics::register(&registry).unwrap();
            let brake = EvictionBrake::new(
                BrakeSettings {
                    primary_rate: 10.0,
                    secondary_rate: 1.0,
                    ..settings()
                },
                at(0),
                Some(metrics.clone()),
            );
            let other = brake.clone();
            let cs = clusters(&[
                ("a1", "a", false),
                ("a2", "a", false),
                ("a3", "a", false),
                ("b1", "b", true),
                ("b2", "b", true),
                ("b3", "b", true),
                ("b4", "b", true),
            ]);
            // Within the startup grace: held, for the rest of it.
            let now = at(10);
            let v = brake.view(&cs, now);
            let h = brake.admit(&v, "a", "rb|x|1@a1", now).unwrap_err();
            assert_eq!(
                (h.reason, h.wait),
                (HoldReason::StartupGrace, Duration::from_secs(30))
            );
            // After it: region a (3 of 3 down) at 1/s, region b at 10/s, each its own bucket,
            // shared by both clones (both producers).
            let now = at(100);
            let v = brake.view(&cs, now);
            assert_eq!(EvictionBrake::region_of(&cs, "a2"), "a");
            assert!(brake.admit(&v, "a", "rb|x|1@a1", now).is_ok());
            let h = other.admit(&v, "a", "rb|x|2@a1", now).unwrap_err();
            assert_eq!(h.reason, HoldReason::RateLimited);
            assert!(
                h.wait.abs_diff(Duration::from_secs(1)) < Duration::from_millis(1),
                "{:?}",
                h.wait
            );
            assert!(other.admit(&v, "b", "rb|x|1@b1", now).is_ok());
            let h = brake.admit(&v, "b", "rb|x|2@b1", now).unwrap_err();
            assert!(
                h.wait.abs_diff(Duration::from_millis(100)) < Duration::from_millis(1),
                "{:?}",
                h.wait
            );
            // The injected clock drives the buckets. The token due in 1 s is reserved for the
            // eviction that was told to wait: another one asking first waits behind it, and
            // the waiter, back at its time, goes (the held ones are not all woken per token).
            let soon = now + chrono::Duration::milliseconds(500);
            let h = brake.admit(&v, "a", "rb|x|3@a1", soon).unwrap_err();
            assert!(
                h.wait.abs_diff(Duration::from_millis(1500)) < Duration::from_millis(1),
                "{:?}",
                h.wait
            );
            let later = now + chrono::Duration::milliseconds(1000);
            assert!(brake.admit(&v, "a", "rb|x|2@a1", later).is_ok());
            let h = brake.admit(&v, "a", "rb|x|3@a1", later).unwrap_err();
            assert!(
                h.wait.abs_diff(Duration::from_millis(1000)) < Duration::from_millis(1),
                "{:?}",
                h.wait
            );
            // Metrics and the report say so.
            assert_eq!(
                metrics
                    .brake_state
                    .with_label_values(&["a", "PartialDisruption"])
                    .get(),
                1
            );
            assert_eq!(
                metrics
                    .brake_state
                    .with_label_values(&["a", "Normal"])
                    .get(),
                0
            );
            assert_eq!(metrics.brake_rate.with_label_values(&["b"]).get(), 10.0);
            assert_eq!(
                metrics
                    .evictions_held
                    .with_label_values(&["a", "RateLimited"])
                    .get(),
                3
            );
            assert_eq!(
                metrics
                    .evictions_held
                    .with_label_values(&["a", "StartupGrace"])
                    .get(),
                1
            );
            let report = brake.report(&cs, later);
            let a = report.iter().find(|r| r.view.region == "a").unwrap();
            assert_eq!(a.held, 4);
            assert_eq!(
                a.view.counts,
                Counts {
                    clusters: 3,
                    not_ready: 3
                }
            );
            // Region b's clusters go too: the whole fleet is down, nothing goes.
            let all_down = clusters(&[("a1", "a", false), ("b1", "b", false)]);
            let v = brake.view(&all_down, later);
            let h = brake.admit(&v, "b", "rb|x|2@b1", later).unwrap_err();
            assert_eq!(h.reason, HoldReason::FullDisruption);
            assert!(h
                .event_message("b1")
                .contains("all 2 clusters of the fleet are not Ready"));
            assert_eq!(
                metrics
                    .brake_state
                    .with_label_values(&["b", "FullDisruption"])
                    .get(),
                1
            );
        }
    }
}
