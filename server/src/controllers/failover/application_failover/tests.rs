//! Tests of application failover: the unhealthy timers through flapping and Unknown, the
//! purge modes' tasks, state preservation, the backoff of repeated failovers, the brake's say
//! (`settle`), the outcome and its report, and the controller on a `TestWorld`.

use super::*;
use crate::controllers::failover::testing::{health_status, one_opened};
use chrono::TimeZone;
use flotilla_api::binding::{GracefulEvictionTask, TargetCluster};
use flotilla_api::policy::{
    DecisionConditions, FailoverBehavior, StatePreservation, StatePreservationRule,
};
use serde_json::json;
use ResourceHealth::{Healthy, Unhealthy, Unknown};

const RB: &str = EVICTION_PRODUCER_RB_APPLICATION_FAILOVER;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0)
        .single()
        .unwrap_or_default()
}

fn app(mode: Option<PurgeMode>, toleration: Option<i32>) -> ApplicationFailoverBehavior {
    ApplicationFailoverBehavior {
        decision_conditions: DecisionConditions {
            toleration_seconds: toleration,
        },
        purge_mode: mode,
        grace_period_seconds: None,
        state_preservation: None,
    }
}

fn spec(app: Option<ApplicationFailoverBehavior>, clusters: &[&str]) -> ResourceBindingSpec {
    ResourceBindingSpec {
        replicas: 2,
        clusters: clusters.iter().map(|c| TargetCluster::new(c, 1)).collect(),
        failover: app.map(|a| FailoverBehavior {
            application: Some(a),
            cluster: None,
        }),
        ..Default::default()
    }
}

/// A health report of each `(cluster, health)`, each with the status `jobStatus.jobID`
/// `job-on-<cluster>` that the state preservation rules read.
fn status(health: &[(&str, ResourceHealth)]) -> ResourceBindingStatus {
    let mut st = health_status(health);
    for item in &mut st.aggregated_status {
        let job = format!("job-on-{}", item.cluster_name);
        item.status = Some(json!({"jobStatus": {"jobID": job}}));
    }
    st
}

/// Runs `decide` over a sequence of (seconds, health on m1) readings with m2 Healthy, and
/// returns at which reading (seconds) m1 was evicted, if it was.
fn evicted_at(toleration: i32, readings: &[(i64, ResourceHealth)]) -> Option<i64> {
    let spec = spec(Some(app(None, Some(toleration))), &["m1", "m2"]);
    let settings = ApplicationFailoverSettings::default();
    let mut state = FailoverState::default();
    for (secs, h) in readings {
        let d = decide(
            &spec,
            &status(&[("m1", *h), ("m2", Healthy)]),
            &state,
            &settings,
            RB,
            at(*secs),
            &Holds::NONE,
        );
        if !d.evictions.is_empty() {
            return Some(*secs);
        }
        state = d.state;
    }
    None
}

#[test]
#[allow(clippy::type_complexity)]
fn unhealthy_timing_with_flapping_and_unknown() {
    let cases: Vec<(&str, Vec<(i64, ResourceHealth)>, Option<i64>)> = vec![
        (
            "continuously Unhealthy: evicted at the toleration",
            vec![(0, Unhealthy), (299, Unhealthy), (300, Unhealthy)],
            Some(300),
        ),
        (
            "Unknown in between neither resets the timer nor counts as recovery",
            vec![
                (0, Unhealthy),
                (100, Unknown),
                (250, Unknown),
                (300, Unhealthy),
            ],
            Some(300),
        ),
        (
            "Unknown at the deadline does not trigger; the next Unhealthy does",
            vec![
                (0, Unhealthy),
                (300, Unknown),
                (400, Unknown),
                (401, Unhealthy),
            ],
            Some(401),
        ),
        (
            "Unknown alone never starts a timer",
            vec![(0, Unknown), (300, Unknown), (600, Unknown)],
            None,
        ),
        (
            "Healthy resets the timer",
            vec![
                (0, Unhealthy),
                (200, Healthy),
                (250, Unhealthy),
                (500, Unhealthy),
            ],
            None,
        ),
        (
            "flapping restarts the timer each time",
            vec![
                (0, Unhealthy),
                (200, Healthy),
                (250, Unhealthy),
                (449, Healthy),
                (450, Unhealthy),
                (749, Unhealthy),
                (750, Unhealthy),
            ],
            Some(750),
        ),
        (
            "toleration 0: evicted on the first Unhealthy reading",
            vec![(0, Healthy), (5, Unhealthy)],
            Some(5),
        ),
    ];
    for (what, readings, want) in cases {
        let tol = if what.starts_with("toleration 0") {
            0
        } else {
            300
        };
        assert_eq!(evicted_at(tol, &readings), want, "{what}");
    }
}

#[test]
fn the_timer_requeues_at_its_deadline_and_survives_in_the_state() {
    let spec = spec(Some(app(None, None)), &["m1", "m2"]);
    let settings = ApplicationFailoverSettings::default();
    let st = status(&[("m1", Unhealthy), ("m2", Healthy)]);
    let d = decide(
        &spec,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(10),
        &Holds::NONE,
    );
    assert_eq!(d.requeue_after, Some(Duration::from_secs(300)));
    assert_eq!(d.state.unhealthy_since.get("m1"), Some(&Time::new(at(10))));
    // The state goes through the annotation and back (a restart reads it there).
    let binding = with_state(&json!({"metadata": {"name": "b"}}), &d.state);
    let read = FailoverState::of(&binding);
    assert_eq!(read, d.state);
    let d = decide(&spec, &st, &read, &settings, RB, at(110), &Holds::NONE);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(200)));
    // A fraction of a second never starts a timer early.
    let late = at(10) + chrono::Duration::milliseconds(400);
    let d = decide(
        &spec,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        late,
        &Holds::NONE,
    );
    assert_eq!(d.state.unhealthy_since.get("m1"), Some(&Time::new(at(11))));
}

#[test]
fn each_purge_mode_builds_its_task() {
    let settings = ApplicationFailoverSettings::default();
    let st = status(&[("m1", Unhealthy), ("m2", Healthy)]);
    // (mode, purge mode in the task, grace period, suppressDeletion)
    let cases = [
        (None, PurgeMode::Graciously, Some(600), None),
        (
            Some(PurgeMode::Graciously),
            PurgeMode::Graciously,
            Some(600),
            None,
        ),
        (
            Some(PurgeMode::Gracefully),
            PurgeMode::Gracefully,
            Some(600),
            None,
        ),
        (
            Some(PurgeMode::Immediately),
            PurgeMode::Immediately,
            None,
            None,
        ),
        (Some(PurgeMode::Directly), PurgeMode::Directly, None, None),
        (Some(PurgeMode::Never), PurgeMode::Never, None, Some(true)),
    ];
    for (mode, want_mode, want_grace, want_suppress) in cases {
        let spec = spec(Some(app(mode, Some(0))), &["m1", "m2"]);
        let d = decide(
            &spec,
            &st,
            &FailoverState::default(),
            &settings,
            RB,
            at(0),
            &Holds::NONE,
        );
        assert_eq!(d.evictions.len(), 1, "{mode:?}");
        let task = &d.evictions[0].task;
        assert_eq!(task.purge_mode, Some(want_mode), "{mode:?}");
        assert_eq!(task.grace_period_seconds, want_grace, "{mode:?}");
        assert_eq!(task.suppress_deletion, want_suppress, "{mode:?}");
        assert_eq!(task.producer, RB);
        assert_eq!(task.reason, EVICTION_REASON_APPLICATION_FAILURE);
        assert_eq!(task.clusters_before_failover, ["m1", "m2"]);
        let mut applied = spec.clone();
        apply(&mut applied, &d, at(3));
        assert_eq!(applied.clusters, vec![TargetCluster::new("m2", 1)]);
        let t = &applied.graceful_eviction_tasks[0];
        assert_eq!(t.from_cluster, "m1");
        assert_eq!(t.creation_timestamp, Some(Time::new(at(3))));
    }
    // The policy's grace period wins over the default.
    let mut a = app(Some(PurgeMode::Gracefully), Some(0));
    a.grace_period_seconds = Some(42);
    let d = decide(
        &spec(Some(a), &["m1", "m2"]),
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds::NONE,
    );
    assert_eq!(d.evictions[0].task.grace_period_seconds, Some(42));
}

#[test]
fn state_preservation_reads_the_old_clusters_status() {
    let mut a = app(Some(PurgeMode::Directly), Some(0));
    a.state_preservation = Some(StatePreservation {
        rules: vec![
            StatePreservationRule {
                alias_label_name: "application.karmada.io/failover-jobid".into(),
                json_path: "{ .jobStatus.jobID }".into(),
            },
            StatePreservationRule {
                alias_label_name: "example.io/none".into(),
                json_path: "{ .nothing }".into(),
            },
        ],
    });
    let d = decide(
        &spec(Some(a), &["m1", "m2"]),
        &status(&[("m1", Unhealthy), ("m2", Healthy)]),
        &FailoverState::default(),
        &ApplicationFailoverSettings::default(),
        RB,
        at(0),
        &Holds::NONE,
    );
    let e = &d.evictions[0];
    assert_eq!(
        e.task
            .preserved_label_state
            .get("application.karmada.io/failover-jobid")
            .map(String::as_str),
        Some("job-on-m1")
    );
    let failures = &e.preservation.as_ref().unwrap().failures;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].label, "example.io/none");
}

#[test]
fn nothing_without_application_failover_or_with_the_gate_off() {
    let st = status(&[("m1", Unhealthy)]);
    let mut state = FailoverState::default();
    state.unhealthy_since.insert("m1".into(), Time::new(at(0)));
    let d = decide(
        &spec(None, &["m1"]),
        &st,
        &state,
        &ApplicationFailoverSettings::default(),
        RB,
        at(1_000),
        &Holds::NONE,
    );
    assert_eq!(d, Decision::default(), "the state is dropped too");
    let off = ApplicationFailoverSettings {
        enabled: false,
        ..Default::default()
    };
    let d = decide(
        &spec(Some(app(None, Some(0))), &["m1"]),
        &st,
        &FailoverState::default(),
        &off,
        RB,
        at(0),
        &Holds::NONE,
    );
    assert!(d.evictions.is_empty());
    assert!(
        d.state.unhealthy_since.contains_key("m1"),
        "timers still run"
    );
    // A cluster already being evicted (by anyone) is left alone.
    let mut evicting = spec(Some(app(None, Some(0))), &["m1"]);
    evicting.graceful_eviction_tasks.push(GracefulEvictionTask {
        from_cluster: "m1".into(),
        producer: "TaintManager".into(),
        ..Default::default()
    });
    let d = decide(
        &evicting,
        &st,
        &FailoverState::default(),
        &ApplicationFailoverSettings::default(),
        RB,
        at(0),
        &Holds::NONE,
    );
    assert!(d.evictions.is_empty());
    assert!(d.state.unhealthy_since.is_empty());
}

#[test]
fn an_immediate_eviction_with_nowhere_to_go_is_held() {
    let st = status(&[("m1", Unhealthy)]);
    let settings = ApplicationFailoverSettings::default();
    let immediate = spec(Some(app(Some(PurgeMode::Directly), Some(0))), &["m1"]);
    let d = decide(
        &immediate,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds {
            no_other_cluster: true,
            ..Holds::NONE
        },
    );
    assert!(d.evictions.is_empty());
    assert_eq!(d.no_target, vec!["m1".to_string()]);
    assert_eq!(d.requeue_after, Some(NO_TARGET_RETRY));
    assert_eq!(d.state.no_target_since, Some(Time::new(at(0))));
    assert_eq!(d.state.streak, 0, "nothing moved");
    // Still held later: the first time is kept (one Event, not one per retry).
    let d = decide(
        &immediate,
        &st,
        &d.state,
        &settings,
        RB,
        at(30),
        &Holds {
            no_other_cluster: true,
            ..Holds::NONE
        },
    );
    assert_eq!(d.state.no_target_since, Some(Time::new(at(0))));
    // A cluster fits again: the eviction goes ahead.
    let d = decide(
        &immediate,
        &st,
        &d.state,
        &settings,
        RB,
        at(60),
        &Holds::NONE,
    );
    assert_eq!(d.evictions.len(), 1);
    assert_eq!(d.state.no_target_since, None);
    // Graceful and Never keep the old copy while nothing fits: never held.
    for mode in [PurgeMode::Graciously, PurgeMode::Never] {
        let d = decide(
            &spec(Some(app(Some(mode), Some(0))), &["m1"]),
            &st,
            &FailoverState::default(),
            &settings,
            RB,
            at(0),
            &Holds {
                no_other_cluster: true,
                ..Holds::NONE
            },
        );
        assert_eq!(d.evictions.len(), 1, "{mode:?}");
    }
}

#[test]
fn backoff_doubles_up_to_its_cap() {
    let s = ApplicationFailoverSettings {
        backoff: Duration::from_secs(60),
        max_backoff: Duration::from_secs(200),
        ..Default::default()
    };
    let table = [(0, 0), (1, 60), (2, 120), (3, 200), (40, 200)];
    for (streak, want) in table {
        assert_eq!(backoff(streak, &s), Duration::from_secs(want), "{streak}");
    }
}

/// One failover step of a binding over three clusters: `on` is where it runs now (and is
/// Unhealthy); returns the decision.
fn step(
    state: &FailoverState,
    on: &str,
    tasks: &[&str],
    settings: &ApplicationFailoverSettings,
    now: i64,
) -> Decision {
    let mut spec = spec(Some(app(None, Some(10))), &[on]);
    spec.graceful_eviction_tasks = tasks
        .iter()
        .map(|c| GracefulEvictionTask {
            from_cluster: c.to_string(),
            producer: RB.into(),
            ..Default::default()
        })
        .collect();
    decide(
        &spec,
        &status(&[(on, Unhealthy)]),
        state,
        settings,
        RB,
        at(now),
        &Holds::NONE,
    )
}

#[test]
fn repeated_failovers_back_off_block_and_stop_at_the_bound() {
    let settings = ApplicationFailoverSettings {
        block_period: Duration::from_secs(1_000),
        backoff: Duration::from_secs(100),
        max_backoff: Duration::from_secs(10_000),
        max_moves: 3,
        enabled: true,
    };
    // m1 unhealthy from 0, evicted at 10.
    let d = step(&FailoverState::default(), "m1", &[], &settings, 0);
    let d = step(&d.state, "m1", &[], &settings, 10);
    assert_eq!(d.evictions.len(), 1);
    assert_eq!(d.state.streak, 1);
    assert_eq!(d.state.blocked(at(10)), vec![("m1".to_string(), None)]);
    // Now on m2 with m1's task pending: m1 stays blocked with no end yet.
    let d = step(&d.state, "m2", &["m1"], &settings, 20);
    assert!(d.evictions.is_empty());
    // m2 due at 30, but the second move of the streak waits until 10 + 100.
    let d = step(&d.state, "m2", &["m1"], &settings, 30);
    assert!(d.evictions.is_empty());
    assert_eq!(
        d.backing_off,
        Some((vec!["m2".to_string()], Time::new(at(110))))
    );
    assert_eq!(d.requeue_after, Some(Duration::from_secs(80)));
    // m1's task goes: its block ends 1000 s later.
    let d = step(&d.state, "m2", &[], &settings, 50);
    assert_eq!(
        d.state.blocked(at(50)),
        vec![("m1".to_string(), Some(Time::new(at(1_050))))]
    );
    let d = step(&d.state, "m2", &[], &settings, 110);
    assert_eq!(d.evictions.len(), 1, "the back-off is over");
    assert_eq!(d.state.streak, 2);
    // On m3, due at 130; the third move waits 200 s after 110.
    let d = step(&d.state, "m3", &["m2"], &settings, 120);
    let d = step(&d.state, "m3", &["m2"], &settings, 309);
    assert_eq!(d.state.backoff_until, Some(Time::new(at(310))));
    assert!(d.evictions.is_empty());
    let d = step(&d.state, "m3", &["m2"], &settings, 310);
    assert_eq!(d.state.backoff_until, None);
    assert_eq!(d.evictions.len(), 1);
    assert_eq!(d.state.streak, 3);
    // Back on m1 after its block: Unhealthy again, but three moves in a row is the bound.
    let d = step(&d.state, "m1", &["m3"], &settings, 2_000);
    let d = step(&d.state, "m1", &["m3"], &settings, 2_100);
    assert!(d.evictions.is_empty());
    assert_eq!(d.halted, vec!["m1".to_string()]);
    assert_eq!(d.requeue_after, None);
    // Healthy on the whole placement with no move under way ends the streak.
    let mut healthy = spec(Some(app(None, Some(10))), &["m1"]);
    healthy.graceful_eviction_tasks.clear();
    let d = decide(
        &healthy,
        &status(&[("m1", Healthy)]),
        &d.state,
        &settings,
        RB,
        at(2_200),
        &Holds::NONE,
    );
    assert!(d.recovered);
    assert_eq!(d.state.streak, 0);
    // Expired blocks are forgotten.
    assert!(d.state.left.iter().all(|l| l.cluster != "m1"));
}

#[test]
fn a_braked_eviction_stays_due_and_counts_for_nothing() {
    let settings = ApplicationFailoverSettings::default();
    let spec = spec(Some(app(None, Some(10))), &["m1", "m2"]);
    let st = status(&[("m1", Unhealthy), ("m2", Unhealthy)]);
    let d = decide(
        &spec,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds::NONE,
    );
    assert!(d.evictions.is_empty());
    // Both due at 10; the brake holds m2 for 3 s.
    let held = Holds {
        braked: [("m2".to_string(), Duration::from_secs(3))].into(),
        ..Holds::NONE
    };
    let d = decide(&spec, &st, &d.state, &settings, RB, at(10), &held);
    assert_eq!(
        d.evictions
            .iter()
            .map(|e| e.cluster.as_str())
            .collect::<Vec<_>>(),
        ["m1"]
    );
    assert_eq!(d.braked, ["m2"]);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(3)));
    assert_eq!(
        d.state.unhealthy_since.get("m2"),
        Some(&Time::new(at(0))),
        "the timer runs on"
    );
    assert_eq!(d.state.streak, 1);
    // Everything held: no move, no streak, no block.
    let all = Holds {
        braked: [
            ("m1".to_string(), Duration::from_secs(10)),
            ("m2".to_string(), Duration::from_secs(10)),
        ]
        .into(),
        ..Holds::NONE
    };
    let d = decide(
        &spec,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds::NONE,
    );
    let d = decide(&spec, &st, &d.state, &settings, RB, at(10), &all);
    assert!(d.evictions.is_empty());
    assert_eq!(d.braked, ["m1", "m2"]);
    assert_eq!(d.state.streak, 0);
    assert_eq!(d.state.last_failover, None);
    assert!(d.state.left.is_empty());
    assert_eq!(d.requeue_after, Some(Duration::from_secs(10)));
}

/// Clusters `(name, Ready)` serving Deployments.
fn fleet(spec: &[(&str, bool)]) -> Clusters {
    let by_name: BTreeMap<String, flotilla_api::cluster::Cluster> = spec
        .iter()
        .map(|&(name, ready)| {
            let c = serde_json::from_value(json!({
                "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"syncMode": "Pull"},
                "status": {
                    "apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}],
                    "conditions": [{"type": "Ready", "status": if ready { "True" } else { "Unknown" },
                                    "reason": "r", "message": "", "lastTransitionTime": "2023-11-14T22:13:20Z"}]}
            }))
            .unwrap();
            (name.to_string(), c)
        })
        .collect();
    let snapshot = ClusterSnapshot::new(by_name.values());
    Clusters { by_name, snapshot }
}

#[test]
fn settle_holds_what_cannot_go_and_asks_the_brake_for_the_rest() {
    use crate::controllers::failover::brake::HoldReason;
    use crate::controllers::settings::BrakeSettings;
    let settings = ApplicationFailoverSettings::default();
    let st = status(&[("m1", Unhealthy)]);
    let placed = |mode: PurgeMode, affinity: &[&str]| {
        let mut s = spec(Some(app(Some(mode), Some(0))), &["m1"]);
        s.resource = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "namespace": "default", "name": "web"}))
        .unwrap();
        s.placement = Some(
            serde_json::from_value(json!({"clusterAffinity": {"clusterNames": affinity},
                "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}))
            .unwrap(),
        );
        s
    };
    let unpaced = || EvictionBrake::new(BrakeSettings::unpaced(), at(-100), None);
    // (case, purge mode, affinity, fleet, brake) → (evicted, no target, braked, held why)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        PurgeMode,
        Vec<&str>,
        Vec<(&str, bool)>,
        Option<EvictionBrake>,
        (Vec<&str>, Vec<&str>, Vec<&str>, Vec<HoldReason>),
    )> = vec![
        (
            "graceful, no brake: evicted",
            PurgeMode::Graciously,
            vec!["m1", "m2"],
            vec![("m1", true), ("m2", true)],
            None,
            (vec!["m1"], vec![], vec![], vec![]),
        ),
        (
            "Immediately, m2 fits: evicted",
            PurgeMode::Immediately,
            vec!["m1", "m2"],
            vec![("m1", true), ("m2", true)],
            Some(unpaced()),
            (vec!["m1"], vec![], vec![], vec![]),
        ),
        (
            "Immediately, nowhere else: held for want of a target, the brake not asked",
            PurgeMode::Immediately,
            vec!["m1"],
            vec![("m1", true), ("m2", true)],
            Some(unpaced()),
            (vec![], vec!["m1"], vec![], vec![]),
        ),
        (
            "the whole fleet not Ready: the brake stops it",
            PurgeMode::Graciously,
            vec!["m1", "m2"],
            vec![("m1", false), ("m2", false)],
            Some(unpaced()),
            (vec![], vec![], vec!["m1"], vec![HoldReason::FullDisruption]),
        ),
    ];
    for (case, mode, affinity, clusters, brake, want) in cases {
        let spec = placed(mode, &affinity);
        let previous = FailoverState::default();
        let look = Look {
            key: "rb|default|web-deployment",
            spec: &spec,
            status: &st,
            previous: &previous,
            settings: &settings,
            producer: RB,
            now: at(0),
        };
        let d = decide(&spec, &st, &previous, &settings, RB, at(0), &Holds::NONE);
        let (d, held) = settle(&look, d, &fleet(&clusters), brake.as_ref());
        let got = (
            d.evictions.iter().map(|e| e.cluster.as_str()).collect(),
            d.no_target.iter().map(String::as_str).collect(),
            d.braked.iter().map(String::as_str).collect(),
            held.values().map(|h| h.reason).collect(),
        );
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn the_fingerprint_ignores_bindings_without_application_failover() {
    let plain = json!({"metadata": {"generation": 3}, "spec": {}, "status": {"aggregatedStatus": [{"clusterName": "m1", "health": "Unhealthy"}]}});
    assert_eq!(judged_fingerprint(&plain), 0);
    let with = json!({"metadata": {"generation": 3}, "spec": {"failover": {"application": {}}},
        "status": {"aggregatedStatus": [{"clusterName": "m1", "health": "Unhealthy"}]}});
    let mut healthier = with.clone();
    healthier["status"]["aggregatedStatus"][0]["health"] = json!("Healthy");
    assert_ne!(judged_fingerprint(&with), judged_fingerprint(&healthier));
    let mut other_status = with.clone();
    other_status["status"]["aggregatedStatus"][0]["status"] = json!({"x": 1});
    assert_eq!(judged_fingerprint(&with), judged_fingerprint(&other_status));
}

/// What the controller hands to the one effect path: the state annotation, the evictions
/// with their history entries and how each is reported, and the notes to tell.
#[test]
fn the_outcome_carries_the_state_the_evictions_and_the_notes() {
    use crate::controllers::failover::effects::Since;
    let settings = ApplicationFailoverSettings::default();
    let note = || {
        vec![Note::event(
            EventType::Normal,
            "ApplicationUnhealthy",
            "m1".into(),
        )]
    };
    let told = || Report {
        notes: note(),
        condition: None,
    };
    let read_of = |spec: &ResourceBindingSpec| {
        json!({"metadata": {"name": "b", "namespace": "default", "generation": 1},
            "spec": serde_json::to_value(spec).unwrap()})
    };

    // Nothing to record: nothing to write.
    let healthy = spec(Some(app(None, None)), &["m1", "m2"]);
    let read = read_of(&healthy);
    let st = status(&[("m1", Healthy), ("m2", Healthy)]);
    let d = decide(
        &healthy,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds::NONE,
    );
    let o = outcome(
        &read,
        healthy.clone(),
        &d,
        Report::default(),
        &settings,
        at(0),
    );
    assert!(!o.writes(&read));

    // A timer starts: the annotation is written, with the notes; no eviction, no history.
    let st = status(&[("m1", Unhealthy), ("m2", Healthy)]);
    let d = decide(
        &healthy,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(0),
        &Holds::NONE,
    );
    let o = outcome(&read, healthy.clone(), &d, told(), &settings, at(0));
    assert!(o.writes(&read));
    assert_eq!(FailoverState::of(&o.binding), d.state);
    assert_eq!(o.binding["spec"], read["spec"]);
    assert!(o.history.is_empty() && o.evicted.is_empty());
    assert_eq!(o.notes, note());

    // The condition changes: it is written with the rest, its Event told last.
    let read = read_of(&healthy);
    let changed = Report {
        notes: note(),
        condition: Some((
            vec![Condition::new(
                CONDITION_APPLICATION_FAILOVER,
                ConditionStatus::False,
                "FailoverLimitReached",
                "limit",
            )],
            Note::event(
                EventType::Warning,
                "ApplicationFailoverHalted",
                "limit".into(),
            ),
        )),
    };
    let o = outcome(
        &read,
        healthy.clone(),
        &Decision::default(),
        changed,
        &settings,
        at(0),
    );
    assert!(o.writes(&read));
    assert_eq!(
        o.binding["status"]["conditions"][0]["reason"],
        "FailoverLimitReached"
    );
    let reasons: Vec<&str> = o.notes.iter().map(|n| n.reason).collect();
    assert_eq!(
        reasons,
        ["ApplicationUnhealthy", "ApplicationFailoverHalted"]
    );

    // Due (tolerationSeconds 0): m1 leaves, its entry opens, its report says how.
    let due = spec(Some(app(Some(PurgeMode::Never), Some(0))), &["m1", "m2"]);
    let read = read_of(&due);
    let d = decide(
        &due,
        &st,
        &FailoverState::default(),
        &settings,
        RB,
        at(5),
        &Holds::NONE,
    );
    let o = outcome(&read, due.clone(), &d, told(), &settings, at(5));
    assert_eq!(
        o.binding["spec"]["clusters"],
        json!([{"name": "m2", "replicas": 1}])
    );
    assert_eq!(
        o.binding["spec"]["gracefulEvictionTasks"][0]["fromCluster"],
        "m1"
    );
    assert_eq!(FailoverState::of(&o.binding).streak, 1);
    let entry = one_opened(&o.history, "due");
    assert_eq!(entry.reason, "ApplicationFailover");
    assert_eq!(entry.from_cluster, "m1");
    let [e] = o.evicted.as_slice() else {
        panic!("one eviction: {:?}", o.evicted);
    };
    assert_eq!(e.producer, RB);
    assert_eq!(e.reason, EVICTION_REASON_APPLICATION_FAILURE);
    assert_eq!(e.cause, d.evictions[0].task.message);
    assert_eq!(e.purge_mode, Some(PurgeMode::Never));
    assert_eq!(e.since, Some(Since::Unhealthy(at(5))));
    assert!(
        e.event
            .starts_with("Application failover: evicted from cluster m1: ")
            && e.event
                .contains("purge mode Never: the old copy stays until suppressDeletion")
            && e.event
                .ends_with("not chosen again for 30m after the old copy goes"),
        "{}",
        e.event
    );
    assert_eq!(o.notes, note());
}

/// The pure half of the controller's report: which Events a decision tells (each once,
/// with its counter) and whether the `ApplicationFailover` condition changes.
#[test]
#[allow(clippy::type_complexity)]
fn report_tells_each_change_once_and_sets_the_condition_when_it_changes() {
    let t = |secs| Time::new(at(secs));
    let timer = |cluster: &str| FailoverState {
        unhealthy_since: [(cluster.to_string(), t(0))].into(),
        ..FailoverState::default()
    };
    let left = |until: Option<Time>| FailoverState {
        left: vec![LeftCluster {
            cluster: "m1".into(),
            evicted_at: Some(t(0)),
            blocked_until: until,
        }],
        ..FailoverState::default()
    };
    let decision = |state: FailoverState| Decision {
        state,
        ..Decision::default()
    };
    let halted = |d: Decision| Decision {
        halted: vec!["m2".into()],
        state: FailoverState {
            streak: 3,
            ..d.state
        },
        ..d
    };
    // The conditions of a binding already told it reached the limit.
    let halted_condition = || {
        condition(&halted(Decision::default()), &[], at(0))
            .map(|(conditions, _)| conditions)
            .unwrap_or_default()
    };
    let held = |reason| Some(Count::ApplicationFailoverHeld(reason));
    // (what, decision, previous state, conditions before,
    //  Events told with their counters, condition after: (status, reason, Event))
    let cases: Vec<(
        &str,
        Decision,
        FailoverState,
        Vec<Condition>,
        Vec<(&str, Option<Count>)>,
        Option<(ConditionStatus, &str, &str)>,
    )> = vec![
        (
            "nothing new: nothing told",
            Decision::default(),
            FailoverState::default(),
            vec![],
            vec![],
            None,
        ),
        (
            "a timer starts",
            decision(timer("m1")),
            FailoverState::default(),
            vec![],
            vec![("ApplicationUnhealthy", None)],
            None,
        ),
        (
            "a running timer is not told again",
            decision(timer("m1")),
            timer("m1"),
            vec![],
            vec![],
            None,
        ),
        (
            "a block starts when the task is gone",
            decision(left(Some(t(1_800)))),
            left(None),
            vec![],
            vec![("FailoverBlockStarted", None)],
            None,
        ),
        (
            "a running block is not told again",
            decision(left(Some(t(1_800)))),
            left(Some(t(1_800))),
            vec![],
            vec![],
            None,
        ),
        (
            "an Immediately eviction is held: told when the hold starts",
            Decision {
                no_target: vec!["m1".into()],
                ..Decision::default()
            },
            FailoverState::default(),
            vec![],
            vec![("ApplicationFailoverHeld", held("NoTarget"))],
            None,
        ),
        (
            "a hold already told",
            Decision {
                no_target: vec!["m1".into()],
                ..Decision::default()
            },
            FailoverState {
                no_target_since: Some(t(0)),
                ..FailoverState::default()
            },
            vec![],
            vec![],
            None,
        ),
        (
            "a back-off: told when its end changes",
            Decision {
                backing_off: Some((vec!["m1".into()], t(300))),
                ..Decision::default()
            },
            FailoverState {
                backoff_until: Some(t(200)),
                ..FailoverState::default()
            },
            vec![],
            vec![("ApplicationFailoverBackoff", held("Backoff"))],
            None,
        ),
        (
            "the same back-off",
            Decision {
                backing_off: Some((vec!["m1".into()], t(300))),
                ..Decision::default()
            },
            FailoverState {
                backoff_until: Some(t(300)),
                ..FailoverState::default()
            },
            vec![],
            vec![],
            None,
        ),
        (
            "the move limit: the condition turns False, once",
            halted(decision(timer("m2"))),
            timer("m2"),
            vec![],
            vec![],
            Some((
                ConditionStatus::False,
                "FailoverLimitReached",
                "ApplicationFailoverHalted",
            )),
        ),
        (
            "the move limit, already told",
            halted(decision(timer("m2"))),
            timer("m2"),
            halted_condition(),
            vec![],
            None,
        ),
        (
            "recovered after the limit: the condition turns True",
            Decision {
                recovered: true,
                ..Decision::default()
            },
            FailoverState::default(),
            halted_condition(),
            vec![],
            Some((
                ConditionStatus::True,
                "ApplicationHealthy",
                "ApplicationFailoverResumed",
            )),
        ),
        (
            "recovered without a limit reached: no condition to set",
            Decision {
                recovered: true,
                ..Decision::default()
            },
            FailoverState::default(),
            vec![],
            vec![],
            None,
        ),
        (
            "several at once, in order",
            Decision {
                no_target: vec!["m2".into()],
                ..decision(FailoverState {
                    unhealthy_since: [("m2".to_string(), t(0))].into(),
                    ..left(Some(t(1_800)))
                })
            },
            left(None),
            vec![],
            vec![
                ("ApplicationUnhealthy", None),
                ("FailoverBlockStarted", None),
                ("ApplicationFailoverHeld", held("NoTarget")),
            ],
            None,
        ),
    ];
    for (what, decision, previous, conditions, want_notes, want_condition) in cases {
        let r = report(&decision, &previous, &conditions, at(10));
        let notes: Vec<(&str, Option<Count>)> = r
            .notes
            .iter()
            .map(|n| (n.reason, n.count.clone()))
            .collect();
        assert_eq!(notes, want_notes, "{what}");
        let got = r.condition.as_ref().map(|(conditions, told)| {
            let c = flotilla_api::meta::find_condition(conditions, CONDITION_APPLICATION_FAILOVER)
                .expect("the condition is set");
            (c.status, c.reason.as_str(), told.reason)
        });
        assert_eq!(got, want_condition, "{what}");
        // The halt is counted and logged with its Event; the resume is neither.
        if let Some((_, told)) = &r.condition {
            let halted = told.reason == "ApplicationFailoverHalted";
            assert_eq!(
                told.count,
                halted.then_some(Count::ApplicationFailoverHeld("FailoverLimitReached")),
                "{what}"
            );
            assert_eq!(told.log.is_some(), halted, "{what}");
        }
    }
}

mod controller {
    use super::*;
    use crate::controllers::failover::testing::{
        eviction_succeeded_event, nginx_binding, with_reason,
    };
    use crate::controllers::runtime::testing::TestWorld;
    use flotilla_api::kinds::well_known;
    use flotilla_support::clock::Clock;

    const KEY: &str = "rb|default|nginx-deployment";

    struct World {
        world: TestWorld,
        af: ApplicationFailoverController,
    }

    /// Application failover as the world's context would build it, with `settings`.
    fn controller(
        world: &TestWorld,
        settings: ApplicationFailoverSettings,
    ) -> ApplicationFailoverController {
        ApplicationFailoverController::new(
            world.store.clone(),
            world.shared_clock.clone(),
            world.events(),
            world.ctx.failover_metrics.clone(),
            settings,
            world.ctx.interpreter.clone(),
        )
    }

    impl World {
        async fn new() -> Self {
            let world = TestWorld::at(at(0));
            world
                .store
                .create(
                    &well_known::resource_bindings(),
                    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                        "metadata": {"name": "nginx-deployment", "namespace": "default"},
                        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"},
                                 "replicas": 2, "propagateDeps": true,
                                 "placement": {},
                                 "failover": {"application": {"decisionConditions": {"tolerationSeconds": 300}}},
                                 "clusters": [{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 1}]}}),
                )
                .await
                .unwrap();
            let af = controller(&world, ApplicationFailoverSettings::default());
            World { world, af }
        }

        async fn binding(&self) -> Value {
            nginx_binding(&self.world.store).await
        }

        /// What the binding status controller reports: member1's health, member2 Healthy.
        async fn report(&self, member1: &str) {
            let mut b = self.binding().await;
            b["status"]["aggregatedStatus"] = json!([
                {"clusterName": "member1", "applied": true, "health": member1},
                {"clusterName": "member2", "applied": true, "health": "Healthy"},
            ]);
            self.world
                .store
                .update_status(&well_known::resource_bindings(), b)
                .await
                .unwrap();
        }

        fn at(&self, secs: i64) {
            let now = self.world.clock.now();
            self.world.clock.advance(at(secs) - now);
        }

        async fn reconcile(&self) -> Action {
            self.af.reconcile(KEY).await.unwrap()
        }
    }

    fn requeue(a: &Action) -> Option<Duration> {
        match a {
            Action::RequeueAfter(d) => Some(*d),
            _ => None,
        }
    }

    /// A due eviction is checked against member1's Work read again from the store: the
    /// aggregated status it judges is the status controller's, built from the leader's cache,
    /// which after a pause may still hold a report the member has since replaced through
    /// another server (issue #36). A newer Healthy report holds the eviction and clears the
    /// timer; once the Work reports Unhealthy too, the eviction goes ahead after a whole
    /// toleration.
    #[tokio::test]
    async fn a_due_failover_goes_ahead_only_if_the_members_latest_report_agrees() {
        use crate::controllers::runtime::testing::work_of_web;
        let w = World::new().await;
        for member in ["member1", "member2"] {
            w.world
                .cluster(
                    member,
                    json!({"syncMode": "Pull"}),
                    json!({"conditions": [{"type": "Ready", "status": "True",
                        "lastTransitionTime": "2024-05-01T10:00:00Z"}]}),
                )
                .await;
        }
        let works = well_known::works();
        let binding = w.binding().await;
        let mut work = work_of_web("member1", None, None, false);
        work["metadata"]["name"] = json!("nginx-687f7fb96f");
        work["metadata"]["ownerReferences"] = json!([{"apiVersion": "work.karmada.io/v1alpha2",
            "kind": "ResourceBinding", "name": "nginx-deployment",
            "uid": binding["metadata"]["uid"], "controller": true}]);
        let work = w.world.store.create(&works, work).await.unwrap();
        // What member1's agent reports of the Deployment: `ready` of its 2 replicas.
        let report = |ready: i64| {
            let mut reported = work_of_web("member1", Some(true), None, false);
            reported["metadata"] = work["metadata"].clone();
            reported["status"]["manifestStatuses"] = json!([{"identifier": {}, "generation": 1,
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                    "readyReplicas": ready, "availableReplicas": ready}}]);
            reported
        };
        let reported = w
            .world
            .store
            .update_status(&works, report(2))
            .await
            .unwrap();

        // The aggregated status still says Unhealthy; the member's Work says Healthy.
        w.report("Unhealthy").await;
        w.reconcile().await;
        w.at(300);
        w.reconcile().await;
        let b = w.binding().await;
        assert_eq!(
            b["spec"]["clusters"].as_array().map(Vec::len),
            Some(2),
            "not evicted on an older report"
        );
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&w.world.metrics.gather())
            .unwrap();
        assert!(
            text.contains("flotilla_application_failovers_held_total{reason=\"NewerReport\"} 1"),
            "{text}"
        );

        // The member reports Unhealthy too: a whole toleration from the next look, then out.
        let mut unhealthy = report(0);
        unhealthy["metadata"] = reported["metadata"].clone();
        w.world
            .store
            .update_status(&works, unhealthy)
            .await
            .unwrap();
        w.at(301);
        w.reconcile().await;
        w.at(600);
        w.reconcile().await;
        let b = w.binding().await;
        assert_eq!(
            b["spec"]["clusters"].as_array().map(Vec::len),
            Some(2),
            "the timer started again at 301"
        );
        w.at(601);
        w.reconcile().await;
        let b = w.binding().await;
        let clusters: Vec<&str> = b["spec"]["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(clusters, ["member2"], "evicted once both agree");
    }

    #[tokio::test]
    async fn the_brake_holds_a_due_failover_until_its_startup_grace_ends() {
        use crate::controllers::failover::brake::{EvictionBrake, EVENT_EVICTION_HELD};
        use crate::controllers::settings::BrakeSettings;
        let mut w = World::new().await;
        let brake = EvictionBrake::new(
            BrakeSettings {
                startup_grace: Duration::from_secs(400),
                ..BrakeSettings::default()
            },
            at(0),
            None,
        );
        w.af = controller(&w.world, ApplicationFailoverSettings::default()).with_brake(brake);
        w.report("Unhealthy").await;
        w.reconcile().await;
        // Due at 300, held by the brake until 400: nothing written, looked at again then.
        w.at(300);
        assert_eq!(
            requeue(&w.reconcile().await),
            Some(Duration::from_secs(100))
        );
        let b = w.binding().await;
        assert_eq!(b["spec"]["clusters"].as_array().map(Vec::len), Some(2));
        assert_eq!(FailoverState::of(&b).streak, 0);
        let events = w.world.stored_events().await;
        let held = with_reason(&events, EVENT_EVICTION_HELD);
        assert_eq!(held.len(), 1, "{events:?}");
        assert!(
            held[0]["message"]
                .as_str()
                .unwrap_or("")
                .contains("StartupGrace"),
            "{}",
            held[0]
        );
        w.at(400);
        assert!(matches!(w.reconcile().await, Action::Done));
        assert_eq!(
            w.binding().await["spec"]["clusters"],
            json!([{"name": "member2", "replicas": 1}])
        );
    }

    #[tokio::test]
    async fn unhealthy_past_toleration_evicts_and_unknown_in_between_does_not_reset() {
        let w = World::new().await;
        w.report("Unhealthy").await;
        assert_eq!(
            requeue(&w.reconcile().await),
            Some(Duration::from_secs(300))
        );
        let b = w.binding().await;
        assert_eq!(
            FailoverState::of(&b).unhealthy_since.get("member1"),
            Some(&Time::new(at(0))),
            "the timer is on the binding"
        );
        // Unknown for a while: the timer stays, nothing happens.
        w.at(100);
        w.report("Unknown").await;
        w.reconcile().await;
        w.at(299);
        w.report("Unhealthy").await;
        assert_eq!(requeue(&w.reconcile().await), Some(Duration::from_secs(1)));
        assert_eq!(
            w.binding().await["spec"]["clusters"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
        w.at(300);
        assert!(matches!(w.reconcile().await, Action::Done));
        let b = w.binding().await;
        assert_eq!(
            b["spec"]["clusters"],
            json!([{"name": "member2", "replicas": 1}])
        );
        let task = &b["spec"]["gracefulEvictionTasks"][0];
        assert_eq!(task["fromCluster"], "member1");
        assert_eq!(task["producer"], EVICTION_PRODUCER_RB_APPLICATION_FAILOVER);
        assert_eq!(task["reason"], "ApplicationFailure");
        assert_eq!(task["purgeMode"], "Graciously");
        assert_eq!(task["gracePeriodSeconds"], 600);
        assert_eq!(
            task["clustersBeforeFailover"],
            json!(["member1", "member2"])
        );
        assert!(task["creationTimestamp"].is_string(), "{task}");
        // The history opens an ApplicationFailover entry with the same facts.
        let entry = &b["status"]["failoverHistory"][0];
        assert_eq!(entry["reason"], "ApplicationFailover", "{b}");
        assert_eq!(entry["fromCluster"], "member1");
        assert_eq!(entry["evictionReason"], "ApplicationFailure");
        assert_eq!(entry["producer"], EVICTION_PRODUCER_RB_APPLICATION_FAILOVER);
        assert_eq!(entry["originalCluster"], json!(["member1", "member2"]));
        assert_eq!(entry["failoverTime"], json!(Time::new(at(300))));
        let state = FailoverState::of(&b);
        assert_eq!(state.streak, 1);
        assert_eq!(state.blocked(at(300)), vec![("member1".to_string(), None)]);
        let events = w.world.stored_events().await;
        assert!(eviction_succeeded_event(&events, "member1"), "{events:?}");
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&w.world.metrics.gather())
            .unwrap();
        assert!(
            text.contains(
                "flotilla_evictions_total{producer=\"resource-binding-application-failover-controller\",reason=\"ApplicationFailure\"} 1"
            ),
            "{text}"
        );
        // Evicted once: another pass writes nothing.
        let rv = b["metadata"]["resourceVersion"].clone();
        w.reconcile().await;
        assert_eq!(w.binding().await["metadata"]["resourceVersion"], rv);
        // The task goes: the block period starts, and the scheduler would keep member1 out.
        let mut b = w.binding().await;
        b["spec"]["gracefulEvictionTasks"] = json!([]);
        w.world
            .store
            .update(&well_known::resource_bindings(), b)
            .await
            .unwrap();
        w.at(400);
        w.reconcile().await;
        let b = w.binding().await;
        assert_eq!(
            blocked_clusters(&b, at(400)),
            vec![("member1".to_string(), Some(Time::new(at(400 + 1_800))))]
        );
        assert!(blocked_clusters(&b, at(400 + 1_800)).is_empty());
    }

    #[tokio::test]
    async fn healthy_resets_the_timer_and_a_restart_keeps_it() {
        let w = World::new().await;
        w.report("Unhealthy").await;
        w.reconcile().await;
        w.at(200);
        w.report("Healthy").await;
        assert!(matches!(w.reconcile().await, Action::Done));
        assert!(!w
            .binding()
            .await
            .lookup("/metadata/annotations")
            .and_then(|a| a.get(STATE_ANNOTATION))
            .is_some_and(|s| s.as_str().unwrap_or("").contains("member1")));
        w.at(250);
        w.report("Unhealthy").await;
        assert_eq!(
            requeue(&w.reconcile().await),
            Some(Duration::from_secs(300))
        );
        w.at(500);
        assert_eq!(requeue(&w.reconcile().await), Some(Duration::from_secs(50)));
        // A new controller (a restarted server) reads the timer from the binding.
        let restarted = controller(&w.world.restarted(), ApplicationFailoverSettings::default());
        w.at(550);
        assert!(matches!(restarted.reconcile(KEY).await, Ok(Action::Done)));
        assert_eq!(
            w.binding().await["spec"]["clusters"],
            json!([{"name": "member2", "replicas": 1}])
        );
    }

    /// At the move limit the state and the `ApplicationFailover` condition go in one
    /// write, and the Event and its counter follow it once.
    #[tokio::test]
    async fn the_move_limit_writes_the_state_and_the_condition_at_once() {
        let w = World::new().await;
        w.report("Unhealthy").await;
        let rt = well_known::resource_bindings();
        let state = FailoverState {
            unhealthy_since: [("member1".to_string(), Time::new(at(0)))].into(),
            streak: 3,
            last_failover: Some(Time::new(at(0))),
            backoff_until: Some(Time::new(at(100))),
            ..FailoverState::default()
        };
        let read = w
            .world
            .store
            .update(&rt, with_state(&w.binding().await, &state))
            .await
            .unwrap();
        let writes = || async {
            let from = read["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok());
            let last: Option<u64> = w.binding().await["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok());
            let mut watch = w
                .world
                .store
                .watch(
                    &rt,
                    crate::store::WatchOptions {
                        from,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            let mut seen = 0;
            let mut at_rv = from;
            while at_rv != last {
                let next = tokio::time::timeout(
                    Duration::from_secs(10),
                    futures::StreamExt::next(&mut watch),
                )
                .await
                .expect("the binding's last write on the watch")
                .unwrap()
                .unwrap();
                at_rv = Some(next.resource_version);
                seen += 1;
            }
            seen
        };
        let halted = || async {
            let events = w.world.stored_events().await;
            with_reason(&events, "ApplicationFailoverHalted").len()
        };
        w.at(1_000);
        w.reconcile().await;
        assert_eq!(
            writes().await,
            1,
            "the state and the condition in one write"
        );
        let b = w.binding().await;
        assert_eq!(FailoverState::of(&b).backoff_until, None);
        let c = conditions_of(&b);
        let c = flotilla_api::meta::find_condition(&c, CONDITION_APPLICATION_FAILOVER)
            .cloned()
            .expect("the condition");
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "FailoverLimitReached")
        );
        assert_eq!(halted().await, 1);
        // Looked at again: nothing new to write or tell.
        w.reconcile().await;
        assert_eq!(writes().await, 1);
        assert_eq!(halted().await, 1);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&w.world.metrics.gather())
            .unwrap();
        assert!(
            text.contains(
                "flotilla_application_failovers_held_total{reason=\"FailoverLimitReached\"} 1"
            ),
            "{text}"
        );
    }
}
