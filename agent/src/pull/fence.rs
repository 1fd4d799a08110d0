//! Self-fencing (docs/failover.md "Safety: self-fencing"): a pull member that has not
//! renewed its lease for `--fence-after` deletes from its runtime the objects of the Works that
//! ask for exactly-once placement (annotation `flotilla.io/placement-guarantee: ExactlyOnce`),
//! so that the copy the server fails over elsewhere never runs beside this one.
//!
//! The objects are deleted, not scaled to zero: a deletion is the same for every kind (a Job or
//! a bare Pod has no replicas to scale), and it is what the server would ask for anyway once the
//! eviction reaches the member. Nothing is started again on the agent's own account: once the
//! lease renews, the fence is lifted and the Works are listed afresh; a Work still there is the
//! server's word that this member should run it, and it is applied again; a Work that is gone
//! or being deleted is not.
//!
//! [`FenceState`] lives in the [`crate::member::Member`] (the fault API reports `fencedAt`); the
//! decision is the pure [`fence_step`]; [`run`] is the loop that acts on it, and once the lease
//! renews it records a Warning Event `Fenced` on each Work it fenced.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::PullContext;
use flotilla_member::ObjectRef;

/// Default of `--fence-after`: shorter than the server's `--cluster-monitor-grace-period` (40 s),
/// so a cut-off member has stopped its exactly-once workloads before the server even marks it
/// not Ready, let alone evicts them.
pub const DEFAULT_FENCE_AFTER: Duration = Duration::from_secs(30);

/// Where a member's fence stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FencePhase {
    /// The lease is being renewed: exactly-once Works are applied.
    Armed,
    /// The lease was not renewed for `fence_after`: exactly-once objects were deleted and are
    /// not applied again.
    Fenced,
    /// The lease renewed after a fence: exactly-once Works wait for a fresh list of the Works
    /// before anything is applied again.
    Lifted,
}

/// What the fence loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceStep {
    /// Look again after this long (the lease may renew meanwhile).
    Wait(Duration),
    /// The lease has not been renewed for `fence_after`: fence now.
    Fence,
    /// Fenced already: nothing to do until the lease renews.
    Idle,
}

/// The fence decision. `last_renewal` is the start of the last lease renewal the server
/// accepted (or the agent's start when none has been), `now` the agent's clock.
pub fn fence_step(
    phase: FencePhase,
    last_renewal: DateTime<Utc>,
    now: DateTime<Utc>,
    fence_after: Duration,
) -> FenceStep {
    if phase == FencePhase::Fenced {
        return FenceStep::Idle;
    }
    let silent = (now - last_renewal).to_std().unwrap_or(Duration::ZERO);
    match fence_after.checked_sub(silent) {
        Some(left) if !left.is_zero() => FenceStep::Wait(left),
        _ => FenceStep::Fence,
    }
}

/// One member's fence: when its lease last renewed, which Works ask for exactly-once and
/// their objects, and whether it is fenced.
#[derive(Debug)]
pub struct FenceState {
    inner: Mutex<Inner>,
    phase: watch::Sender<FencePhase>,
}

#[derive(Debug)]
struct Inner {
    last_renewal: Option<DateTime<Utc>>,
    /// Exactly-once Works (`namespace/name`) with their objects.
    tracked: BTreeMap<String, Vec<ObjectRef>>,
    fenced_at: Option<DateTime<Utc>>,
    fences: u64,
    /// Works fenced and not yet told to the server (an Event each once it is reachable).
    untold: Vec<(String, DateTime<Utc>)>,
}

impl Default for FenceState {
    fn default() -> Self {
        FenceState {
            inner: Mutex::new(Inner {
                last_renewal: None,
                tracked: BTreeMap::new(),
                fenced_at: None,
                fences: 0,
                untold: Vec::new(),
            }),
            phase: watch::channel(FencePhase::Armed).0,
        }
    }
}

impl FenceState {
    /// The current phase.
    pub fn phase(&self) -> FencePhase {
        *self.phase.borrow()
    }

    /// A receiver woken on every phase change.
    pub fn subscribe(&self) -> watch::Receiver<FencePhase> {
        self.phase.subscribe()
    }

    /// A lease renewal that started at `at` was accepted by the server; lifts a fence.
    pub fn renewed(&self, at: DateTime<Utc>) {
        let mut inner = self.inner.lock();
        if inner.last_renewal.is_none_or(|seen| at > seen) {
            inner.last_renewal = Some(at);
        }
        drop(inner);
        self.phase.send_if_modified(|p| {
            let lift = *p == FencePhase::Fenced;
            if lift {
                *p = FencePhase::Lifted;
            }
            lift
        });
    }

    /// The Works were listed afresh after a lift: exactly-once Works may be applied again.
    pub fn rearm(&self) {
        self.phase.send_if_modified(|p| {
            let lifted = *p == FencePhase::Lifted;
            if lifted {
                *p = FencePhase::Armed;
            }
            lifted
        });
    }

    /// Whether a Work asking for exactly-once may be applied now.
    pub fn allows_apply(&self) -> bool {
        self.phase() == FencePhase::Armed
    }

    /// Records whether the Work `key` asks for exactly-once, with its objects.
    pub fn track(&self, key: &str, exactly_once: bool, objects: Vec<ObjectRef>) {
        let mut inner = self.inner.lock();
        if exactly_once {
            inner.tracked.insert(key.to_string(), objects);
        } else {
            inner.tracked.remove(key);
        }
    }

    /// Forgets the Work `key`.
    pub fn untrack(&self, key: &str) {
        self.inner.lock().tracked.remove(key);
    }

    /// The last accepted renewal (the agent's start when none).
    pub fn last_renewal(&self, started: DateTime<Utc>) -> DateTime<Utc> {
        self.inner.lock().last_renewal.unwrap_or(started)
    }

    /// When the member last fenced, if ever.
    pub fn fenced_at(&self) -> Option<DateTime<Utc>> {
        self.inner.lock().fenced_at
    }

    /// How many times the member fenced.
    pub fn fences(&self) -> u64 {
        self.inner.lock().fences
    }

    /// The objects of `works` are gone from the runtime (at `at`): reported as `fencedAt`, and
    /// as an Event per Work once the server can be told.
    pub fn fenced(&self, at: DateTime<Utc>, works: Vec<String>) {
        let mut inner = self.inner.lock();
        inner.fenced_at = Some(at);
        inner.fences += 1;
        inner.untold.extend(works.into_iter().map(|w| (w, at)));
    }

    /// The fenced Works not yet told, with when; empties the list.
    pub fn take_untold(&self) -> Vec<(String, DateTime<Utc>)> {
        std::mem::take(&mut self.inner.lock().untold)
    }

    /// Decides at `now` and, when it is time, turns Fenced and answers the objects to delete
    /// (from then on, no exactly-once Work is applied).
    pub fn check(
        &self,
        started: DateTime<Utc>,
        now: DateTime<Utc>,
        fence_after: Duration,
    ) -> (FenceStep, Vec<(String, Vec<ObjectRef>)>) {
        let step = fence_step(self.phase(), self.last_renewal(started), now, fence_after);
        if step != FenceStep::Fence {
            return (step, Vec::new());
        }
        let objects = self
            .inner
            .lock()
            .tracked
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.phase.send_replace(FencePhase::Fenced);
        (step, objects)
    }
}

/// Watches the member's lease renewals and fences it when they stop for `fence_after`.
pub async fn run(ctx: Arc<PullContext>, mut shutdown: watch::Receiver<bool>) {
    let fence = &ctx.member.fence;
    let Some(fence_after) = ctx.timing.fence_after else {
        return;
    };
    let started = ctx.clock.now();
    let mut phase = fence.subscribe();
    loop {
        let (step, objects) = fence.check(started, ctx.clock.now(), fence_after);
        if step == FenceStep::Fence {
            let silent_ms = (ctx.clock.now() - fence.last_renewal(started)).num_milliseconds();
            tracing::warn!(cluster = %ctx.cluster(), silent_ms, works = objects.len(),
                "lease not renewed for --fence-after; fencing exactly-once workloads");
            let works: Vec<String> = objects.iter().map(|(w, _)| w.clone()).collect();
            for (work, refs) in objects {
                for object in refs {
                    match ctx.member.runtime.delete(&object).await {
                        Ok(_) => tracing::warn!(cluster = %ctx.cluster(), work = %work,
                            object = %object, "fenced: deleted from the member"),
                        Err(e) => tracing::warn!(cluster = %ctx.cluster(), work = %work,
                            object = %object, error = %flotilla_support::error_chain(&e),
                            "fencing: deleting from the member failed"),
                    }
                }
            }
            fence.fenced(ctx.clock.now(), works);
            continue;
        }
        if fence.phase() != FencePhase::Fenced {
            // The lease renews again: each fenced Work gets its Event (best effort).
            for (work, at) in fence.take_untold() {
                record_fenced(&ctx, &work, at, fence_after).await;
            }
        }
        // Wake at the deadline, on a renewal (phase change), or at a coarse recheck so a
        // renewal that moved `last_renewal` without a phase change pushes the deadline out.
        let wait = match step {
            FenceStep::Wait(d) => d,
            _ => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = phase.changed() => {}
            _ = flotilla_member::stopped(&mut shutdown) => return,
        }
    }
}

/// Records a Warning Event `Fenced` about the Work `key` (`namespace/name`); failures are logged.
async fn record_fenced(ctx: &PullContext, key: &str, at: DateTime<Utc>, fence_after: Duration) {
    let Some((namespace, name)) = key.split_once('/') else {
        return;
    };
    let now = ctx.clock.now();
    let stamp = flotilla_api::meta::Time::new(now).to_string();
    let suffix = format!("{:x}", now.timestamp_nanos_opt().unwrap_or_default());
    let message = format!(
        "lease not renewed for {}s: the exactly-once workload's objects were deleted from cluster {} at {}; they are applied again only if this Work is still wanted",
        fence_after.as_secs_f64(),
        ctx.cluster(),
        super::lease::micro_time(at),
    );
    let event = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{suffix}"), "namespace": namespace},
        "involvedObject": {
            "apiVersion": flotilla_api::work::WORK_API_VERSION,
            "kind": "Work",
            "namespace": namespace,
            "name": name,
        },
        "reason": "Fenced",
        "message": message,
        "type": "Warning",
        "source": {"component": "flotilla-agent", "host": ctx.cluster()},
        "reportingComponent": "flotilla-agent",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    });
    let path = format!("/api/v1/namespaces/{namespace}/events");
    if let Err(e) = ctx.client.post(&path, &event).await {
        tracing::warn!(cluster = %ctx.cluster(), work = %key, error = %flotilla_support::error_chain(&e),
            "recording the Fenced event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use flotilla_support::clock::{Clock, FakeClock};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn fence_step_table() {
        let s = Duration::from_secs;
        let at = |secs: i64| t0() + chrono::Duration::seconds(secs);
        let table = [
            (
                "renewed just now",
                FencePhase::Armed,
                at(0),
                at(0),
                FenceStep::Wait(s(30)),
            ),
            (
                "silent 29 s",
                FencePhase::Armed,
                at(0),
                at(29),
                FenceStep::Wait(s(1)),
            ),
            (
                "silent exactly fence_after",
                FencePhase::Armed,
                at(0),
                at(30),
                FenceStep::Fence,
            ),
            (
                "silent longer",
                FencePhase::Armed,
                at(0),
                at(100),
                FenceStep::Fence,
            ),
            (
                "already fenced",
                FencePhase::Fenced,
                at(0),
                at(100),
                FenceStep::Idle,
            ),
            // Lifted but not yet re-listed: a new silence still fences.
            (
                "lifted, silent again",
                FencePhase::Lifted,
                at(0),
                at(31),
                FenceStep::Fence,
            ),
            // A renewal stamped ahead of the agent's clock (it moved back): wait the full period.
            (
                "renewal in the future",
                FencePhase::Armed,
                at(10),
                at(0),
                FenceStep::Wait(s(30)),
            ),
        ];
        for (name, phase, last, now, want) in table {
            assert_eq!(fence_step(phase, last, now, s(30)), want, "{name}");
        }
    }

    #[test]
    fn fences_once_on_silence_and_lifts_only_after_a_renewal_and_a_fresh_list() {
        let clock = FakeClock::new(t0());
        let started = clock.now();
        let fence = FenceState::default();
        let obj = ObjectRef::from_manifest(&serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "default", "name": "db"}}))
        .unwrap();
        fence.track("karmada-es-m1/db", true, vec![obj.clone()]);
        fence.track("karmada-es-m1/web", false, vec![]);
        fence.renewed(clock.now());
        clock.advance(chrono::Duration::seconds(10));
        let after = Duration::from_secs(30);
        assert_eq!(
            fence.check(started, clock.now(), after).0,
            FenceStep::Wait(Duration::from_secs(20))
        );
        fence.renewed(clock.now());
        clock.advance(chrono::Duration::seconds(29));
        assert!(fence.check(started, clock.now(), after).1.is_empty());
        clock.advance(chrono::Duration::seconds(1));
        let (step, objects) = fence.check(started, clock.now(), after);
        assert_eq!(step, FenceStep::Fence);
        assert_eq!(objects, vec![("karmada-es-m1/db".to_string(), vec![obj])]);
        fence.fenced(clock.now(), vec!["karmada-es-m1/db".to_string()]);
        assert_eq!(fence.fenced_at(), Some(clock.now()));
        assert_eq!(
            fence.take_untold(),
            vec![("karmada-es-m1/db".to_string(), clock.now())]
        );
        assert!(fence.take_untold().is_empty(), "told once");
        assert!(!fence.allows_apply());
        // Fenced: nothing more until the lease renews.
        clock.advance(chrono::Duration::seconds(60));
        assert_eq!(
            fence.check(started, clock.now(), after),
            (FenceStep::Idle, vec![])
        );
        fence.renewed(clock.now());
        assert_eq!(fence.phase(), FencePhase::Lifted);
        assert!(
            !fence.allows_apply(),
            "not before the Works are listed afresh"
        );
        fence.rearm();
        assert!(fence.allows_apply());
        assert_eq!(fence.fences(), 1);
    }

    #[test]
    fn without_any_renewal_the_agent_start_counts() {
        let fence = FenceState::default();
        let started = t0();
        let after = Duration::from_secs(5);
        assert_eq!(
            fence
                .check(started, started + chrono::Duration::seconds(5), after)
                .0,
            FenceStep::Fence
        );
    }
}
