//! The one effect path of a failover outcome: what the taint manager, application failover
//! and failback write and tell once they have decided (docs/semantics.md §5, §11, and Part 1's
//! failback). Each of them turns its decision into an [`Outcome`] with pure functions — the
//! binding to write (placement, eviction tasks, annotations), the [`HistoryStep`]s of that
//! write, the clusters it evicts ([`Evicted`]) and the other Events it tells ([`Note`]) — and
//! hands it to [`Effects::carry_out`], which
//!
//! 1. stages the history into the binding ([`history::stage`]),
//! 2. makes the one write, spec and status together, with compare-and-swap on the
//!    resourceVersion read (a conflict fails the reconcile, which decides again on the new
//!    binding),
//! 3. for each eviction, counts it (`flotilla_evictions_total` and its latency histogram),
//!    logs it, records its Normal `EvictWorkloadFromClusterSucceed` Event on the binding and
//!    on its resource template, as Karmada does (docs/semantics.md §5), and reports its state
//!    preservation (`state_preservation::report`: a Warning Event per rule that gave no label
//!    and the `StatePreserved` condition, a status write of its own after the eviction),
//! 4. records the outcome's other Events, each with the counter it bumps and its log line.
//!
//! A decision that writes nothing tells its Events through [`Effects::tell`]. One write per
//! outcome is what the failover benchmark measures; nothing here adds one. The eviction itself,
//! in the spec, is [`evict`] for both evicting controllers (their `apply`, which the failover
//! dry-run calls too).

use crate::controllers::failover::history::{self, HistoryStep};
use crate::controllers::failover::metrics::{seconds_since, FailoverMetrics};
use crate::controllers::failover::state_preservation::{self, Preservation};
use crate::controllers::shared::binding_keys::set_placement;
use crate::controllers::shared::template_ref::template_ref;
use crate::events::{EventRecorder, EventType};
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use flotilla_api::binding::{EvictionOptions, ResourceBindingSpec};
use flotilla_api::kinds::ResourceType;
use flotilla_api::meta::Time;
use flotilla_api::policy::PurgeMode;
use serde_json::Value;
use std::sync::Arc;

/// The Event reason of every eviction: Karmada's, a Normal Event on the binding and on its
/// resource template (docs/semantics.md §5).
pub const EVENT_EVICTED: &str = "EvictWorkloadFromClusterSucceed";

/// The eviction itself, in the spec: `cluster` leaves `spec.clusters` and its eviction task
/// (`task`) is added, stamped `now` so that its grace period counts from the eviction (a
/// cluster that already had a task keeps it, stamped now if it had no stamp).
pub fn evict(
    spec: &mut ResourceBindingSpec,
    cluster: &str,
    task: EvictionOptions,
    now: DateTime<Utc>,
) {
    spec.graceful_evict_cluster(cluster, task);
    if let Some(task) = spec
        .graceful_eviction_tasks
        .iter_mut()
        .find(|t| t.from_cluster == cluster && t.creation_timestamp.is_none())
    {
        task.creation_timestamp = Some(Time::new(now));
    }
}

/// What a failover decision writes and tells: the one input of [`Effects::carry_out`].
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The binding to write: the binding as read with the decision in it.
    pub binding: Value,
    /// What the write does to the failover history, in order.
    pub history: Vec<HistoryStep>,
    /// The clusters the binding leaves, each reported once the write is done.
    pub evicted: Vec<Evicted>,
    /// The outcome's other Events, recorded after the evictions' own.
    pub notes: Vec<Note>,
}

impl Outcome {
    /// An outcome that writes `binding` and tells `notes`, with no eviction and no history.
    pub fn of(binding: Value, notes: Vec<Note>) -> Self {
        Outcome {
            binding,
            history: Vec::new(),
            evicted: Vec::new(),
            notes,
        }
    }

    /// The outcome of evictions: `binding` (the binding as read, `read`, with any other part of
    /// the decision in it) gets the placement and eviction tasks of `spec` (the spec with the
    /// evictions applied), and each eviction opens its history entry
    /// ([`history::entries_for`]).
    pub fn evicting(
        read: &Value,
        mut binding: Value,
        spec: &ResourceBindingSpec,
        evicted: Vec<Evicted>,
        notes: Vec<Note>,
        now: DateTime<Utc>,
    ) -> Self {
        set_placement(&mut binding, spec);
        let facts: Vec<history::Evicted<'_>> = evicted
            .iter()
            .map(|e| history::Evicted {
                cluster: &e.cluster,
                reason: e.reason,
                producer: &e.producer,
                message: e.cause.clone(),
            })
            .collect();
        let history = history::entries_for(&facts, read, spec, now)
            .into_iter()
            .map(|entry| HistoryStep::Open(Box::new(entry)))
            .collect();
        Outcome {
            binding,
            history,
            evicted,
            notes,
        }
    }

    /// Whether the outcome changes the binding as read (`read`), so that a write is needed.
    pub fn writes(&self, read: &Value) -> bool {
        self.binding != *read
    }
}

/// One cluster a binding leaves, as the effect path reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Evicted {
    /// The cluster.
    pub cluster: String,
    /// The controller that evicted (the task's producer, the metrics' label).
    pub producer: String,
    /// The eviction reason (`TaintUntolerated`, `ApplicationFailure`).
    pub reason: &'static str,
    /// Why, in words: the log's, and the history entry's when no task carries it.
    pub cause: String,
    /// The message of its `EvictWorkloadFromClusterSucceed` Events.
    pub event: String,
    /// The purge mode of its task (`None`: no task).
    pub purge_mode: Option<PurgeMode>,
    /// Since when the failure behind it lasted, for its latency histogram (`None`: not known).
    pub since: Option<Since>,
    /// What the state-preservation rules gave (`None`: the policy has none).
    pub preservation: Option<Preservation>,
}

/// The start of the failure an eviction ends: which latency histogram it feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// A `NoExecute` taint's `timeAdded` (`flotilla_taint_to_eviction_seconds`).
    Taint(DateTime<Utc>),
    /// The first Unhealthy report (`flotilla_unhealthy_to_eviction_seconds`).
    Unhealthy(DateTime<Utc>),
}

/// An Event an outcome records besides its evictions' own, with the counter it bumps and the
/// log line it leaves.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// Normal or Warning.
    pub kind: EventType,
    /// The Event's reason.
    pub reason: &'static str,
    /// The Event's message.
    pub message: String,
    /// The counter it bumps, if any.
    pub count: Option<Count>,
    /// The log line it leaves, if any.
    pub log: Option<Log>,
}

impl Note {
    /// An Event without a counter or a log line.
    pub fn event(kind: EventType, reason: &'static str, message: String) -> Self {
        Note {
            kind,
            reason,
            message,
            count: None,
            log: None,
        }
    }

    /// The same, bumping `count`.
    pub fn counting(mut self, count: Count) -> Self {
        self.count = Some(count);
        self
    }

    /// The same, logged at info level (`warn`: at warn level) as `what`, about `cluster`
    /// (one name, or several joined by commas).
    pub fn logged(mut self, warn: bool, what: &'static str, cluster: String) -> Self {
        self.log = Some(Log {
            warn,
            what,
            cluster,
        });
        self
    }
}

/// A failover counter a [`Note`] bumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// `flotilla_application_failovers_held_total{reason}`.
    ApplicationFailoverHeld(&'static str),
    /// `flotilla_failbacks_total{cluster}`.
    Failback(String),
}

/// The log line of a [`Note`]: `what`, with the binding, the cluster(s) and the Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    /// Warn level (else info).
    pub warn: bool,
    /// The line.
    pub what: &'static str,
    /// The cluster or clusters it is about (joined by commas).
    pub cluster: String,
}

/// The shell that carries outcomes out: the controller's store, Event recorder and failover
/// metrics.
#[derive(Clone, Copy)]
pub struct Effects<'a> {
    /// Where the binding is written.
    pub store: &'a dyn Store,
    /// The controller's Event recorder (its component names the Events).
    pub events: &'a EventRecorder,
    /// The failover metrics.
    pub metrics: &'a FailoverMetrics,
}

impl Effects<'_> {
    /// Carries out `outcome` on the binding `key` of kind `rt`, as read (`read`): the history
    /// staged into the binding, one write of spec and status, then each eviction's metrics,
    /// log, Event and state-preservation report, then the other Events. Returns the binding
    /// written. A failed write tells nothing (the caller decides again); a failed
    /// state-preservation report only loses the report.
    pub async fn carry_out(
        &self,
        key: &str,
        rt: &ResourceType,
        read: &Value,
        outcome: Outcome,
        now: DateTime<Utc>,
    ) -> Result<Arc<Value>, StoreError> {
        let Outcome {
            mut binding,
            history,
            evicted,
            notes,
        } = outcome;
        history::stage(read, &mut binding, &history);
        let written = self.store.update_with_status(rt, binding).await?;
        for e in &evicted {
            self.report_eviction(key, rt, &written, e, now).await;
        }
        self.tell(key, &written, &notes).await;
        Ok(written)
    }

    /// Records `notes` on `binding` (as last read or written), each with its counter and log
    /// line.
    pub async fn tell(&self, key: &str, binding: &Value, notes: &[Note]) {
        for note in notes {
            match &note.count {
                Some(Count::ApplicationFailoverHeld(reason)) => self
                    .metrics
                    .application_failovers_held
                    .with_label_values(&[reason])
                    .inc(),
                Some(Count::Failback(cluster)) => self
                    .metrics
                    .failbacks
                    .with_label_values(&[cluster.as_str()])
                    .inc(),
                None => {}
            }
            match &note.log {
                Some(l) if l.warn => {
                    tracing::warn!(binding = key, cluster = %l.cluster, reason = note.reason, event = %note.message, "{}", l.what);
                }
                Some(l) => {
                    tracing::info!(binding = key, cluster = %l.cluster, reason = note.reason, event = %note.message, "{}", l.what);
                }
                None => {}
            }
            self.events
                .record(binding, note.kind, note.reason, &note.message)
                .await;
        }
    }

    /// One eviction, written: its counter and latency, its log line, its Events (on the binding
    /// and on its template) and its state preservation.
    async fn report_eviction(
        &self,
        key: &str,
        rt: &ResourceType,
        written: &Value,
        e: &Evicted,
        now: DateTime<Utc>,
    ) {
        tracing::info!(binding = key, cluster = %e.cluster, producer = %e.producer, reason = e.reason, purge_mode = ?e.purge_mode, cause = %e.cause, "evicted");
        self.metrics
            .evictions
            .with_label_values(&[e.producer.as_str(), e.reason])
            .inc();
        let latency = match e.since {
            Some(Since::Taint(t)) => Some((&self.metrics.taint_to_eviction, t)),
            Some(Since::Unhealthy(t)) => Some((&self.metrics.unhealthy_to_eviction, t)),
            None => None,
        };
        if let Some((histogram, since)) = latency {
            histogram
                .with_label_values(&[e.producer.as_str()])
                .observe(seconds_since(since, now));
        }
        // Karmada's reason and type, on the binding and on its template (docs/semantics.md §5).
        self.events
            .record(written, EventType::Normal, EVENT_EVICTED, &e.event)
            .await;
        if let Some(template) = template_ref(written) {
            self.events
                .record(&template, EventType::Normal, EVENT_EVICTED, &e.event)
                .await;
        }
        if let Some(p) = &e.preservation {
            // The eviction is written; a failed status write only loses the report.
            if let Err(err) = state_preservation::report(
                self.store,
                self.events,
                rt,
                written,
                p,
                e.purge_mode,
                now,
            )
            .await
            {
                tracing::warn!(binding = key, cluster = %e.cluster, error = %err, "writing the StatePreserved condition failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::failover::state_preservation::{RuleFailure, RuleProblem};
    use crate::controllers::failover::testing::{assert_placement, one_opened};
    use crate::controllers::runtime::testing::TestWorld;
    use crate::store::WatchOptions;
    use flotilla_api::history::GONE_WITHOUT_TASK;
    use flotilla_api::json_pointer::JsonPointer;
    use flotilla_api::kinds::well_known;
    use serde_json::json;

    const KEY: &str = "rb|default|web";

    fn binding() -> Value {
        json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "web", "namespace": "default", "generation": 1},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                     "replicas": 3,
                     "clusters": [{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 2}]}})
    }

    /// `m1` leaves `spec` with a task (`task`) or without.
    fn evict_m1(spec: &mut ResourceBindingSpec, task: bool) {
        if task {
            spec.graceful_evict_cluster(
                "m1",
                EvictionOptions {
                    purge_mode: Some(PurgeMode::Graciously),
                    producer: "TaintManager".into(),
                    reason: "TaintUntolerated".into(),
                    message: "the task's words".into(),
                    clusters_before_failover: vec!["m1".into(), "m2".into()],
                    ..EvictionOptions::default()
                },
            );
        } else {
            spec.clusters.retain(|c| c.name != "m1");
        }
    }

    fn evicted(preservation: Option<Preservation>) -> Evicted {
        Evicted {
            cluster: "m1".into(),
            producer: "TaintManager".into(),
            reason: "TaintUntolerated",
            cause: "the cause".into(),
            event: "Evicted from cluster m1".into(),
            purge_mode: Some(PurgeMode::Graciously),
            since: Some(Since::Taint(
                TestWorld::epoch() - chrono::Duration::seconds(30),
            )),
            preservation,
        }
    }

    fn spec_of(binding: &Value) -> ResourceBindingSpec {
        serde_json::from_value(binding["spec"].clone()).unwrap_or_default()
    }

    #[test]
    fn an_eviction_opens_its_entry_in_the_outcome() {
        let read = binding();
        let now = TestWorld::epoch();
        // (what, a task, the entry's message, closed from the start)
        let cases = [
            (
                "with a task: the entry copies it",
                true,
                "the task's words",
                false,
            ),
            ("without a task: closed at once", false, "the cause", true),
        ];
        for (what, task, message, closed) in cases {
            let mut spec = spec_of(&read);
            evict_m1(&mut spec, task);
            let o = Outcome::evicting(&read, read.clone(), &spec, vec![evicted(None)], vec![], now);
            assert!(o.writes(&read), "{what}");
            assert_placement(
                &o.binding,
                json!([{"name": "m2", "replicas": 2}]),
                usize::from(task),
                what,
            );
            let entry = one_opened(&o.history, what);
            assert_eq!(entry.from_cluster, "m1", "{what}");
            assert_eq!(entry.original_cluster, ["m1", "m2"], "{what}");
            assert_eq!(entry.message, message, "{what}");
            assert_eq!(entry.replicas, 1, "{what}");
            assert_eq!(entry.is_open(), !closed, "{what}");
            if closed {
                assert_eq!(entry.old_copy_gone_reason, GONE_WITHOUT_TASK, "{what}");
            }
        }
        // An outcome that leaves the binding as it is writes nothing.
        assert!(!Outcome::of(read.clone(), vec![]).writes(&read));
    }

    /// [`binding`], stored in `world`.
    async fn stored(world: &TestWorld) -> Value {
        world
            .store
            .create(&well_known::resource_bindings(), binding())
            .await
            .expect("the binding")
    }

    /// The effect path over `world`'s store, recorder and metrics.
    fn effects(world: &TestWorld) -> Effects<'_> {
        Effects {
            store: world.store.as_ref(),
            events: &world.ctx.events,
            metrics: &world.ctx.failover_metrics,
        }
    }

    /// The binding's writes since `from` (a resourceVersion), as a watch delivers them.
    async fn writes_since(world: &TestWorld, from: &Value) -> Vec<Value> {
        let rt = well_known::resource_bindings();
        let from: Option<u64> = from["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok());
        let last: Option<u64> = world
            .store
            .get(&rt, Some("default"), "web")
            .await
            .expect("the binding")["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok());
        let mut watch = world
            .store
            .watch(
                &rt,
                WatchOptions {
                    from,
                    ..Default::default()
                },
            )
            .await
            .expect("a watch");
        let mut seen: Vec<crate::store::WatchEvent> = Vec::new();
        while seen.last().map(|e| e.resource_version) != last {
            let next = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                futures::StreamExt::next(&mut watch),
            )
            .await
            .expect("the binding's last write on the watch")
            .expect("the watch goes on")
            .expect("no error");
            seen.push(next);
        }
        seen.into_iter().map(|e| Value::clone(&e.object)).collect()
    }

    async fn reasons(world: &TestWorld) -> Vec<String> {
        let mut reasons: Vec<String> = world
            .stored_events()
            .await
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect();
        reasons.sort();
        reasons
    }

    /// One write for the eviction and its history; the state-preservation report's status
    /// write after it only when the rules were evaluated; each eviction counted, timed and
    /// told; each note told and counted.
    #[tokio::test]
    async fn carry_out_writes_once_then_reports_each_eviction_and_tells_the_notes() {
        let failed = Preservation {
            cluster: "m1".into(),
            labels: Default::default(),
            failures: vec![RuleFailure {
                label: "example.io/job".into(),
                json_path: "{.job}".into(),
                problem: RuleProblem::NoMatch {
                    detail: "no value".into(),
                },
            }],
        };
        // (what, preservation, binding writes, Events)
        let cases = [
            (
                "no state-preservation rules",
                None,
                1,
                vec![EVENT_EVICTED, EVENT_EVICTED, "FailingBack"],
            ),
            (
                "a rule that gave no label",
                Some(failed),
                2,
                vec![
                    EVENT_EVICTED,
                    EVENT_EVICTED,
                    "FailingBack",
                    "StatePreservationFailed",
                ],
            ),
        ];
        for (what, preservation, writes, events) in cases {
            let world = TestWorld::new();
            let rt = well_known::resource_bindings();
            let read = stored(&world).await;
            let mut spec = spec_of(&read);
            evict_m1(&mut spec, true);
            let told = Note::event(EventType::Normal, "FailingBack", "a note".into())
                .counting(Count::Failback("m2".into()))
                .logged(false, "a note", "m2".into());
            let outcome = Outcome::evicting(
                &read,
                read.clone(),
                &spec,
                vec![evicted(preservation)],
                vec![told],
                world.now(),
            );
            let written = effects(&world)
                .carry_out(KEY, &rt, &read, outcome, world.now())
                .await
                .expect("written");
            let seen = writes_since(&world, &read).await;
            assert_eq!(seen.len(), writes, "{what}: {seen:?}");
            // The first write is the eviction with its history entry.
            assert_eq!(seen[0], *written, "{what}");
            assert_eq!(
                written["spec"]["gracefulEvictionTasks"][0]["fromCluster"],
                "m1"
            );
            assert_eq!(written["status"]["failoverHistory"][0]["fromCluster"], "m1");
            assert_eq!(reasons(&world).await, events, "{what}");
            // Karmada's eviction Event: Normal, on the binding and on its template.
            let evictions: Vec<(String, String, String)> = world
                .stored_events()
                .await
                .iter()
                .filter(|e| e["reason"] == EVENT_EVICTED)
                .map(|e| {
                    let field = |p: &str| e.lookup(p).and_then(Value::as_str).unwrap_or("");
                    (
                        field("/type").to_string(),
                        field("/involvedObject/kind").to_string(),
                        field("/involvedObject/name").to_string(),
                    )
                })
                .collect();
            let normal = |kind: &str| ("Normal".to_string(), kind.to_string(), "web".to_string());
            assert!(
                evictions.contains(&normal("ResourceBinding")),
                "{what}: {evictions:?}"
            );
            assert!(
                evictions.contains(&normal("Deployment")),
                "{what}: {evictions:?}"
            );
            let m = &world.ctx.failover_metrics;
            assert_eq!(
                m.evictions
                    .with_label_values(&["TaintManager", "TaintUntolerated"])
                    .get(),
                1,
                "{what}"
            );
            let latency = m.taint_to_eviction.with_label_values(&["TaintManager"]);
            assert_eq!(latency.get_sample_count(), 1, "{what}");
            assert!((latency.get_sample_sum() - 30.0).abs() < 1e-9, "{what}");
            assert_eq!(m.failbacks.with_label_values(&["m2"]).get(), 1, "{what}");
        }
    }

    /// A decision that writes nothing still tells its notes, with their counters.
    #[tokio::test]
    async fn tell_records_the_notes_without_a_write() {
        let world = TestWorld::new();
        let rt = well_known::resource_bindings();
        let read = stored(&world).await;
        let notes = [
            Note::event(EventType::Warning, "ApplicationFailoverHeld", "held".into())
                .counting(Count::ApplicationFailoverHeld("NoTarget")),
            Note::event(EventType::Normal, "FailoverBlockStarted", "blocked".into()),
        ];
        effects(&world).tell(KEY, &read, &notes).await;
        let now = world
            .store
            .get(&rt, Some("default"), "web")
            .await
            .expect("the binding");
        assert_eq!(
            now["metadata"]["resourceVersion"],
            read["metadata"]["resourceVersion"]
        );
        assert_eq!(
            reasons(&world).await,
            ["ApplicationFailoverHeld", "FailoverBlockStarted"]
        );
        assert_eq!(
            world
                .ctx
                .failover_metrics
                .application_failovers_held
                .with_label_values(&["NoTarget"])
                .get(),
            1
        );
    }
}
