//! The eviction brake: every eviction of a (binding, cluster), whichever controller produces
//! it (taint manager, application failover), asks this brake first. It paces *failure
//! domains*, not workloads, as Kubernetes' node lifecycle controller paces nodes: a failed
//! cluster takes one token of its region's bucket, and once it has it every binding on it is
//! evicted without further pacing, each when its own `tolerationSeconds` runs out. And it stops
//! a control plane cut off from its members from evicting them all (karmada-io/karmada#5150),
//! with the zone states Kubernetes uses for nodes, here for clusters grouped by `spec.region`
//! (docs/semantics.md Part 1, "The eviction brake").
//!
//! The region's state, as pure functions of (each cluster's region and Ready, the flags, the
//! server's start, now) — [`fleet_view`], [`state_of`], [`pace_of`], [`ceiling_of`]:
//! - **StartupGrace**: for one `--cluster-monitor-grace-period` after the server started,
//!   nothing is evicted (the Ready conditions read at start may be stale).
//! - **FullDisruption**: every cluster of the fleet is not Ready, or more than
//!   `--large-fleet-partition-threshold` (0.7) of a fleet of at least `--large-fleet-size`
//!   (10) clusters: evictions stop everywhere.
//! - **PartialDisruption**: more than `--unhealthy-cluster-threshold` (0.55) of the region's
//!   clusters, or of the whole fleet, are not Ready, and at least
//!   [`MIN_NOT_READY_FOR_DISRUPTION`] of them: failed clusters are let out at
//!   `--secondary-cluster-eviction-rate` (0.01/s, one every 100 s).
//! - **Normal**: failed clusters are let out at `--cluster-eviction-rate` (0.1/s, one every
//!   10 s; the first at once).
//!
//! Which evictions need their cluster's token ([`need_of`]): a cluster failure's (the taint
//! manager's), and an application failure's on a cluster that is not Ready (in a partition, a
//! failed cluster's applications must not become a way around the brake). An application that
//! fails on a Ready cluster is one workload's failure: it moves at once, never queued behind
//! another cluster's evacuation; only the stops hold it. A cluster keeps its token (it is
//! *released*) until it is Ready without a NoExecute taint again, or until the fleet is fully
//! disrupted (as Kubernetes cancels a zone's evictions then): once the partition ends, the
//! clusters still down queue again.
//!
//! Karmada's `--resource-eviction-rate` stays as an optional ceiling, in bindings per second
//! per region, on the evictions of failed clusters (unset by default; whoever sets it gets
//! Karmada's pacing on top of the clusters'); `--secondary-resource-eviction-rate` is its
//! PartialDisruption value.
//!
//! Small regions: as Kubernetes does for zones (a zone is partially disrupted only with more
//! than two not-Ready nodes), one or two failed clusters are never read as a partition, so
//! a region of one or two clusters that fails is failed over at the normal rate; the
//! fleet-wide rules still stop a control plane that lost every member.
//!
//! A rate of 0 stops evictions in that state; `--enable-eviction-rate-limit=false` turns
//! pacing off (the stops of StartupGrace and FullDisruption stay), and
//! `--eviction-startup-grace-period` sets the startup wait apart from the monitor grace period
//! (0s: none).
//!
//! The shared part is [`EvictionBrake`]: per region one bucket of cluster tokens (burst 1, as
//! Kubernetes' eviction limiter), and the clusters it released. A region whose rate changes
//! gets a new bucket; when the old one had no token to give, the new one starts empty
//! (Kubernetes' `SwapLimiter` drains it), so a region that slides into PartialDisruption just
//! after letting one cluster out does not let out a second at once. The buckets run on the
//! server's injected clock, so tests drive them with a fake one. The brake lives in the
//! controller context, so both producers draw from the same buckets, and the API reads it for
//! `kubectl get evictionbrakes`. When the brake says wait, a producer writes nothing and
//! requeues after the time the brake says. The brake's memory is the process's: after a
//! restart the startup grace holds everything, then the clusters still failed queue again,
//! the first at once.

use crate::controllers::failover::metrics::FailoverMetrics;
use crate::controllers::runtime::limiter::{Rate, TokenBucket};
use crate::controllers::settings::BrakeSettings;
use crate::controllers::shared::cluster_cache::Clusters;
use crate::events::{EventRecorder, EventType};
use chrono::{DateTime, Utc};
use flotilla_api::cluster::{Cluster, TaintEffect};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
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
    /// Failed clusters are let out at the primary rate.
    Normal,
    /// Too many clusters not Ready: failed clusters are let out at the secondary rate.
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

    /// Whether nothing may be evicted in this state.
    pub fn stops(self) -> bool {
        matches!(
            self,
            RegionState::FullDisruption | RegionState::StartupGrace
        )
    }
}

/// How fast something may go: failed clusters let out, or (the ceiling) evictions.
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

    /// `0.1 clusters/s`, `unlimited`, `stopped` (`unit`: what is counted).
    pub fn describe(self, unit: &str) -> String {
        match self {
            Pace::Unlimited => "unlimited".into(),
            Pace::PerSecond(r) => format!("{r} {unit}/s"),
            Pace::Stopped => "stopped".into(),
        }
    }
}

/// The unit of the brake's rate, as [`Pace::describe`] prints it.
pub const CLUSTERS: &str = "clusters";
/// The unit of the `--resource-eviction-rate` ceiling.
pub const EVICTIONS: &str = "evictions";

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
    /// How fast it lets failed clusters out.
    pub pace: Pace,
    /// The `--resource-eviction-rate` ceiling on the evictions of failed clusters (`None`:
    /// not set).
    pub ceiling: Option<Pace>,
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

/// How fast a region in `state` lets failed clusters out.
pub fn pace_of(state: RegionState, settings: &BrakeSettings) -> Pace {
    let rate = match state {
        RegionState::StartupGrace | RegionState::FullDisruption => return Pace::Stopped,
        RegionState::Normal => settings.cluster_rate,
        RegionState::PartialDisruption => settings.secondary_cluster_rate,
    };
    paced(rate, settings)
}

/// The `--resource-eviction-rate` ceiling of a region in `state` (`None`: not set).
pub fn ceiling_of(state: RegionState, settings: &BrakeSettings) -> Option<Pace> {
    let rate = match state {
        RegionState::StartupGrace | RegionState::FullDisruption => {
            return settings.resource_rate.map(|_| Pace::Stopped)
        }
        RegionState::Normal => settings.resource_rate?,
        RegionState::PartialDisruption => settings
            .secondary_resource_rate
            .or(settings.resource_rate)?,
    };
    Some(paced(rate, settings))
}

fn paced(rate: f64, settings: &BrakeSettings) -> Pace {
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
            ceiling: ceiling_of(state, settings),
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

/// Why an eviction is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The cluster failed: a NoExecute taint the binding does not tolerate (the taint
    /// manager).
    ClusterFailure,
    /// The application failed on the cluster (application failover).
    ApplicationFailure,
}

/// What one eviction needs of its region's brake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// Its cluster must take a token of the region first (it has none yet).
    pub cluster_token: bool,
    /// It counts against the `--resource-eviction-rate` ceiling.
    pub ceiling: bool,
}

/// What an eviction for `cause` from a cluster that is `cluster_ready` (or not), and that was
/// `released` (took its token since it failed) or not, needs of the brake.
pub fn need_of(cause: Cause, cluster_ready: bool, released: bool) -> Need {
    let cluster_failed = cause == Cause::ClusterFailure || !cluster_ready;
    Need {
        cluster_token: cluster_failed && !released,
        ceiling: cause == Cause::ClusterFailure,
    }
}

/// Whether the brake keeps a released `cluster` released: while it is failed (not Ready, or
/// tainted NoExecute) and its region is not fully disrupted.
pub fn stays_released(cluster: &Cluster, state: RegionState) -> bool {
    let failed = !cluster.is_ready()
        || cluster
            .spec
            .taints
            .iter()
            .any(|t| t.effect == TaintEffect::NoExecute);
    failed && state != RegionState::FullDisruption
}

/// Why the brake made an eviction wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldReason {
    /// The cluster waits for its turn at the region's cluster rate.
    RateLimited,
    /// The `--resource-eviction-rate` ceiling allows the next eviction later.
    ResourceRateLimited,
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
            HoldReason::ResourceRateLimited => "ResourceRateLimited",
            HoldReason::StartupGrace => "StartupGrace",
            HoldReason::FullDisruption => "FullDisruption",
            HoldReason::RateZero => "RateZero",
        }
    }

    /// Whether evictions stopped (an Event says so) rather than being paced.
    pub fn stops(self) -> bool {
        !matches!(
            self,
            HoldReason::RateLimited | HoldReason::ResourceRateLimited
        )
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

/// Decides for one eviction in a region from the region's verdict and what the eviction
/// `need`s, given what the region's buckets answer when asked (`cluster_token`: the cluster
/// takes its token; `ceiling_token`: one of the ceiling's; each `Ok` a token was taken,
/// `Err(wait)` none until then). The cluster's token is asked for first: a cluster that took
/// it stays released even when the ceiling then makes this eviction wait.
pub fn admit_in(
    view: &RegionView,
    grace_until: DateTime<Utc>,
    now: DateTime<Utc>,
    need: Need,
    cluster_token: impl FnOnce(f64) -> Result<(), Duration>,
    ceiling_token: impl FnOnce(f64) -> Result<(), Duration>,
) -> Result<(), Hold> {
    let hold = |reason, wait| Hold {
        region: view.region.clone(),
        reason,
        wait,
        message: view.reason.clone(),
    };
    match view.state {
        RegionState::StartupGrace => {
            let wait = (grace_until - now).to_std().unwrap_or(Duration::ZERO);
            return Err(hold(
                HoldReason::StartupGrace,
                wait.max(Duration::from_millis(1)),
            ));
        }
        RegionState::FullDisruption => {
            return Err(hold(HoldReason::FullDisruption, STOPPED_RETRY));
        }
        RegionState::Normal | RegionState::PartialDisruption => {}
    }
    if need.cluster_token {
        match view.pace {
            Pace::Stopped => return Err(hold(HoldReason::RateZero, STOPPED_RETRY)),
            Pace::Unlimited => {}
            Pace::PerSecond(rate) => {
                cluster_token(rate).map_err(|wait| hold(HoldReason::RateLimited, wait))?
            }
        }
    }
    if need.ceiling {
        match view.ceiling {
            None | Some(Pace::Unlimited) => {}
            Some(Pace::Stopped) => return Err(hold(HoldReason::RateZero, STOPPED_RETRY)),
            Some(Pace::PerSecond(rate)) => {
                ceiling_token(rate).map_err(|wait| hold(HoldReason::ResourceRateLimited, wait))?
            }
        }
    }
    Ok(())
}

/// A cluster the brake let out, or one waiting for its turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterTurn {
    /// The cluster.
    pub cluster: String,
    /// When it was let out, or when its turn comes.
    pub at: DateTime<Utc>,
}

/// What the API shows of one region.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionReport {
    /// The verdict.
    pub view: RegionView,
    /// Evictions held in the region since the server started.
    pub held: u64,
    /// Failed clusters let out (all their bindings may go), in name order.
    pub released: Vec<ClusterTurn>,
    /// Failed clusters waiting for their turn, soonest first.
    pub queued: Vec<ClusterTurn>,
}

/// Per region, one bucket at the region's rate, and who waits for a token reserved for it
/// (by key: a cluster, or a binding's eviction). Each waiter is admitted at its own time, so a
/// thousand held evictions are not all woken for every token.
#[derive(Default)]
struct Turns {
    buckets: BTreeMap<String, (f64, TokenBucket)>,
    /// Key → (region, when its reserved token is due).
    waiting: HashMap<String, (String, Instant)>,
}

impl Turns {
    /// `key` of `region` asks for a token at `rate` at `at`.
    fn take(&mut self, region: &str, key: &str, rate: f64, at: Instant) -> Result<(), Duration> {
        let swapped = match self.buckets.get(region) {
            Some((old, _)) if *old == rate => None,
            Some((_, bucket)) => Some(bucket.has_token_at(at)),
            None => Some(true),
        };
        if let Some(had_token) = swapped {
            // A new region, or a new rate: a new bucket, empty when the old one had no token
            // to give (Kubernetes' SwapLimiter), and the waits reserved at the old rate go.
            let r = Rate {
                per_second: rate,
                burst: 1,
            };
            let bucket = if had_token {
                TokenBucket::new_at(r, at)
            } else {
                TokenBucket::drained_at(r, at)
            };
            self.buckets.insert(region.to_string(), (rate, bucket));
            self.waiting.retain(|_, (r, _)| r != region);
        }
        if let Some((_, due)) = self.waiting.get(key) {
            let due = *due;
            return if at >= due {
                self.waiting.remove(key);
                Ok(())
            } else {
                Err(due - at)
            };
        }
        // Reservations nobody came back for (the eviction was no longer needed) go.
        self.waiting
            .retain(|_, (_, due)| at.saturating_duration_since(*due) < STALE_RESERVATION);
        let Some((_, bucket)) = self.buckets.get(region) else {
            return Ok(());
        };
        match bucket.reserve_at(at) {
            Duration::ZERO => Ok(()),
            wait => {
                self.waiting
                    .insert(key.to_string(), (region.to_string(), at + wait));
                Err(wait)
            }
        }
    }

    /// Forgets what `key` waited for.
    fn forget(&mut self, key: &str) {
        self.waiting.remove(key);
    }
}

struct Inner {
    settings: BrakeSettings,
    started: DateTime<Utc>,
    /// The wall-clock instant `epoch.0` is the bucket clock's `epoch.1`: buckets run on the
    /// server's (injected) clock.
    epoch: (DateTime<Utc>, Instant),
    /// Failed clusters' turns, per region.
    clusters: Mutex<Turns>,
    /// The `--resource-eviction-rate` ceiling's turns, per region, by ticket.
    ceiling: Mutex<Turns>,
    /// Clusters let out: name → (region, when).
    released: Mutex<BTreeMap<String, (String, DateTime<Utc>)>>,
    /// The stop last told (as an Event) per ticket, so a stop is told once, not on every
    /// look while it lasts; forgotten when the eviction goes.
    told: Mutex<HashMap<String, String>>,
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

/// One eviction, as it asks the brake.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The binding's key (`rb|ns|name`).
    pub binding: &'a str,
    /// The cluster it leaves.
    pub cluster: &'a str,
    /// Why.
    pub cause: Cause,
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
                clusters: Mutex::new(Turns::default()),
                ceiling: Mutex::new(Turns::default()),
                released: Mutex::new(BTreeMap::new()),
                told: Mutex::new(HashMap::new()),
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

    /// The verdict for `clusters` at `now` (also published as metrics). Clusters that
    /// recovered, or whose region is fully disrupted, lose their release here.
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
        self.forget_recovered(clusters, Some(&view));
        self.publish(&view);
        view
    }

    /// Forgets the release of the clusters that recovered (and with `view`, of those whose
    /// region is fully disrupted), and the turns of clusters that recovered while they
    /// waited. Cheap: it looks only at the clusters the brake remembers, so every look of a
    /// producer at a binding does it, evictions or not.
    pub fn forget_recovered(&self, clusters: &Clusters, view: Option<&FleetView>) {
        let keeps = |name: &str| {
            clusters.by_name.get(name).is_some_and(|c| {
                let state = view.map_or(RegionState::Normal, |v| {
                    v.region(region_name(&c.spec.region)).state
                });
                stays_released(c, state)
            })
        };
        self.inner.released.lock().retain(|name, _| keeps(name));
        // A cluster that recovered while waiting for its turn waits no more.
        self.inner
            .clusters
            .lock()
            .waiting
            .retain(|name, _| keeps(name));
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

    /// Asks for one eviction at `now`, with `view` the verdict for `clusters`: `Ok` it may go
    /// (its cluster was let out, now or before, when it needed to be), `Err` it must wait and
    /// nothing may be written. A cluster that must wait has the region's next token reserved
    /// for it and takes it when one of its evictions asks again at or after the wait given.
    pub fn admit(
        &self,
        view: &FleetView,
        clusters: &Clusters,
        ask: Ask<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), Hold> {
        let region = Self::region_of(clusters, ask.cluster);
        let region_view = view.region(region);
        let ready = clusters
            .by_name
            .get(ask.cluster)
            .is_some_and(Cluster::is_ready);
        let released = self.inner.released.lock().contains_key(ask.cluster);
        let need = need_of(ask.cause, ready, released);
        let at = self.instant(now);
        let ticket = ticket_of(ask.binding, ask.cluster);
        let result = admit_in(
            &region_view,
            view.grace_until,
            now,
            need,
            |rate| {
                // One lock over the look, the token and the release: two evictions of one
                // cluster asking at once must not both take a token (the second would find
                // the bucket empty and wait a whole turn for a cluster already let out).
                let mut turns = self.inner.clusters.lock();
                if self.is_released(ask.cluster) {
                    return Ok(());
                }
                turns.take(region, ask.cluster, rate, at)?;
                self.release_locked(&mut turns, region, ask.cluster, now);
                Ok(())
            },
            |rate| self.inner.ceiling.lock().take(region, &ticket, rate, at),
        );
        if need.cluster_token && region_view.pace == Pace::Unlimited && !region_view.state.stops() {
            // Pacing off: the cluster is let out without a token.
            self.release(region, ask.cluster, now);
        }
        match &result {
            Ok(()) => {
                self.inner.told.lock().remove(&ticket);
            }
            Err(hold) => {
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
                tracing::debug!(binding = ask.binding, cluster = ask.cluster, region = %hold.region, reason = hold.reason.as_str(), wait_ms = hold.wait.as_millis() as u64, "eviction held by the brake");
            }
        }
        result
    }

    fn release(&self, region: &str, cluster: &str, now: DateTime<Utc>) {
        let mut turns = self.inner.clusters.lock();
        self.release_locked(&mut turns, region, cluster, now);
    }

    /// Lets `cluster` out, with the turns already locked (locks are taken turns first, then
    /// the released set).
    fn release_locked(&self, turns: &mut Turns, region: &str, cluster: &str, now: DateTime<Utc>) {
        let mut released = self.inner.released.lock();
        if released.contains_key(cluster) {
            return;
        }
        released.insert(cluster.to_string(), (region.to_string(), now));
        drop(released);
        turns.forget(cluster);
        if let Some(m) = &self.inner.metrics {
            m.clusters_released.with_label_values(&[region]).inc();
        }
        tracing::info!(
            cluster,
            region,
            "eviction brake: cluster let out, all its bindings may go"
        );
    }

    /// Whether `cluster` was let out (all its evictions may go).
    pub fn is_released(&self, cluster: &str) -> bool {
        self.inner.released.lock().contains_key(cluster)
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

    /// Every region's verdict, held count and clusters, for the API.
    pub fn report(&self, clusters: &Clusters, now: DateTime<Utc>) -> Vec<RegionReport> {
        let view = self.view(clusters, now);
        let held = self.inner.held.lock().clone();
        let released = self.inner.released.lock().clone();
        let queued: Vec<(String, String, Instant)> = self
            .inner
            .clusters
            .lock()
            .waiting
            .iter()
            .map(|(c, (r, due))| (c.clone(), r.clone(), *due))
            .collect();
        view.regions
            .into_values()
            .map(|v| {
                let mut waiting: Vec<ClusterTurn> = queued
                    .iter()
                    .filter(|(c, r, _)| r == &v.region && clusters.by_name.contains_key(c))
                    .map(|(c, _, due)| ClusterTurn {
                        cluster: c.clone(),
                        at: self.wall(*due),
                    })
                    .collect();
                waiting.sort_by(|a, b| a.at.cmp(&b.at).then(a.cluster.cmp(&b.cluster)));
                RegionReport {
                    held: held.get(&v.region).copied().unwrap_or(0),
                    released: released
                        .iter()
                        .filter(|(_, (r, _))| r == &v.region)
                        .map(|(c, (_, at))| ClusterTurn {
                            cluster: c.clone(),
                            at: *at,
                        })
                        .collect(),
                    queued: waiting,
                    view: v,
                }
            })
            .collect()
    }

    fn instant(&self, now: DateTime<Utc>) -> Instant {
        let (wall, mono) = self.inner.epoch;
        mono + (now - wall).to_std().unwrap_or(Duration::ZERO)
    }

    fn wall(&self, at: Instant) -> DateTime<Utc> {
        let (wall, mono) = self.inner.epoch;
        wall + chrono::Duration::from_std(at.saturating_duration_since(mono))
            .unwrap_or(chrono::Duration::MAX)
    }

    fn publish(&self, view: &FleetView) {
        let Some(m) = &self.inner.metrics else {
            return;
        };
        let mut queued: BTreeMap<&str, i64> =
            view.regions.keys().map(|r| (r.as_str(), 0)).collect();
        let turns = self.inner.clusters.lock();
        for (region, _) in turns.waiting.values() {
            if let Some(n) = queued.get_mut(region.as_str()) {
                *n += 1;
            }
        }
        for (name, r) in &view.regions {
            for s in RegionState::ALL {
                m.brake_state
                    .with_label_values(&[name.as_str(), s.as_str()])
                    .set(i64::from(s == r.state));
            }
            m.brake_rate
                .with_label_values(&[name.as_str()])
                .set(r.pace.per_second());
            m.clusters_queued
                .with_label_values(&[name.as_str()])
                .set(queued.get(name.as_str()).copied().unwrap_or(0));
        }
    }
}

/// Names one eviction: which binding from which cluster.
fn ticket_of(binding: &str, cluster: &str) -> String {
    format!("{binding}@{cluster}")
}

/// The reason of the Event on a binding whose eviction the brake stopped.
pub const EVENT_EVICTION_HELD: &str = "EvictionHeld";

/// Asks `brake` (none: everything goes) for the eviction of one binding, for `cause`, from
/// each of `clusters_evicted` at `now`, in order; answers the ones that must wait. Each one
/// that may go has had what it needed of the brake.
pub fn hold_back<'c>(
    brake: Option<&EvictionBrake>,
    clusters: &Clusters,
    binding: &str,
    cause: Cause,
    clusters_evicted: impl IntoIterator<Item = &'c str>,
    now: DateTime<Utc>,
) -> BTreeMap<String, Hold> {
    let mut held = BTreeMap::new();
    let Some(brake) = brake else {
        return held;
    };
    brake.forget_recovered(clusters, None);
    let mut view = None;
    for cluster in clusters_evicted {
        let view = view.get_or_insert_with(|| brake.view(clusters, now));
        let ask = Ask {
            binding,
            cluster,
            cause,
        };
        if let Err(h) = brake.admit(view, clusters, ask, now) {
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
mod tests;
