//! Tests of the eviction brake: region states by the node lifecycle rules, the pace and the
//! ceiling from the flags, the reason's wording, admission per state, and the live brake pacing
//! failed clusters, not bindings.

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
                ("a", Normal, Pace::PerSecond(0.1)),
                ("b", Normal, Pace::PerSecond(0.1)),
            ],
        ),
        (
            "one region over the threshold",
            vec![("a", 4, 3), ("b", 6, 0)],
            100,
            vec![
                ("a", PartialDisruption, Pace::PerSecond(0.01)),
                ("b", Normal, Pace::PerSecond(0.1)),
            ],
        ),
        (
            "a region at the threshold (11 of 20 = 55%) is not over it",
            vec![("a", 20, 11), ("b", 20, 0)],
            100,
            vec![
                ("a", Normal, Pace::PerSecond(0.1)),
                ("b", Normal, Pace::PerSecond(0.1)),
            ],
        ),
        (
            "12 of 20 is over it",
            vec![("a", 20, 12), ("b", 20, 0)],
            100,
            vec![
                ("a", PartialDisruption, Pace::PerSecond(0.01)),
                ("b", Normal, Pace::PerSecond(0.1)),
            ],
        ),
        (
            "the whole fleet over the threshold slows every region",
            vec![("a", 3, 3), ("b", 2, 0)],
            100,
            vec![
                ("a", PartialDisruption, Pace::PerSecond(0.01)),
                ("b", PartialDisruption, Pace::PerSecond(0.01)),
            ],
        ),
        (
            "small region: two clusters down is a failure, not a partition",
            vec![("a", 3, 0), ("b", 2, 2), ("c", 3, 0)],
            100,
            vec![
                ("a", Normal, Pace::PerSecond(0.1)),
                ("b", Normal, Pace::PerSecond(0.1)),
                ("c", Normal, Pace::PerSecond(0.1)),
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
                ("a", PartialDisruption, Pace::PerSecond(0.01)),
                ("b", PartialDisruption, Pace::PerSecond(0.01)),
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
            vec![("a", Normal, Pace::PerSecond(0.1))],
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
        cluster_rate: 0.0,
        ..settings()
    };
    let table = [
        (&s, Normal, Pace::PerSecond(0.1)),
        (&s, PartialDisruption, Pace::PerSecond(0.01)),
        (&s, FullDisruption, Pace::Stopped),
        (&s, StartupGrace, Pace::Stopped),
        (&off, Normal, Pace::Unlimited),
        (&off, PartialDisruption, Pace::Unlimited),
        (&off, FullDisruption, Pace::Stopped),
        (&off, StartupGrace, Pace::Stopped),
        (&zero, Normal, Pace::Stopped),
        (&zero, PartialDisruption, Pace::PerSecond(0.01)),
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
fn ceiling_follows_the_flags() {
    use RegionState::*;
    let none = settings();
    let one = BrakeSettings {
        resource_rate: Some(1.0),
        ..settings()
    };
    let two = BrakeSettings {
        resource_rate: Some(1.0),
        secondary_resource_rate: Some(0.2),
        ..settings()
    };
    let off = BrakeSettings {
        rate_limit: false,
        ..one.clone()
    };
    let table = [
        (&none, Normal, None),
        (&none, FullDisruption, None),
        (&one, Normal, Some(Pace::PerSecond(1.0))),
        (&one, PartialDisruption, Some(Pace::PerSecond(1.0))),
        (&one, StartupGrace, Some(Pace::Stopped)),
        (&two, PartialDisruption, Some(Pace::PerSecond(0.2))),
        (&off, Normal, Some(Pace::Unlimited)),
    ];
    for (settings, state, want) in table {
        assert_eq!(ceiling_of(state, settings), want, "{state:?} {settings:?}");
    }
}

#[test]
fn what_an_eviction_needs() {
    use Cause::*;
    // (cause, cluster Ready, cluster released, needs the cluster's token, counts against
    // the ceiling)
    let table = [
        (ClusterFailure, false, false, true, true),
        (ClusterFailure, false, true, false, true),
        // A NoExecute taint on a Ready cluster (a drain) is the cluster's failure too.
        (ClusterFailure, true, false, true, true),
        // One application failing on a healthy cluster goes at once.
        (ApplicationFailure, true, false, false, false),
        // An application "failing" on a failed cluster needs the cluster's turn: in a
        // partition it is no way around the brake.
        (ApplicationFailure, false, false, true, false),
        (ApplicationFailure, false, true, false, false),
    ];
    for (cause, ready, released, token, ceiling) in table {
        assert_eq!(
            need_of(cause, ready, released),
            Need {
                cluster_token: token,
                ceiling
            },
            "{cause:?} ready={ready} released={released}"
        );
    }
}

#[test]
fn admission_per_state() {
    let s = settings();
    let grace = at(40);
    let view = |spec: &[(&'static str, usize, usize)], after| {
        fleet_view(fleet(spec), &s, at(0), at(after))
    };
    let never = |_| -> Result<(), Duration> { panic!("no bucket for this one") };
    let token = Need {
        cluster_token: true,
        ceiling: true,
    };
    // StartupGrace: wait until the grace ends.
    let v = view(&[("a", 3, 3)], 30);
    let h = admit_in(&v.region("a"), grace, at(30), token, never, never).unwrap_err();
    assert_eq!(
        (h.reason, h.wait),
        (HoldReason::StartupGrace, Duration::from_secs(10))
    );
    // FullDisruption: look again after the retry, released or not.
    let v = view(&[("a", 3, 3)], 100);
    let released = Need {
        cluster_token: false,
        ceiling: true,
    };
    for need in [token, released] {
        let h = admit_in(&v.region("a"), grace, at(100), need, never, never).unwrap_err();
        assert_eq!(
            (h.reason, h.wait),
            (HoldReason::FullDisruption, STOPPED_RETRY)
        );
        assert!(h.reason.stops());
    }
    // Paced: the cluster's bucket decides, at the region's rate.
    let v = view(&[("a", 3, 3), ("b", 3, 0)], 100);
    let mut asked = None;
    let h = admit_in(
        &v.region("a"),
        grace,
        at(100),
        token,
        |r| {
            asked = Some(r);
            Err(Duration::from_secs(7))
        },
        never,
    )
    .unwrap_err();
    assert_eq!(asked, Some(0.01));
    assert_eq!(
        (h.reason, h.wait),
        (HoldReason::RateLimited, Duration::from_secs(7))
    );
    assert!(!h.reason.stops());
    assert!(admit_in(
        &v.region("b"),
        grace,
        at(100),
        token,
        |r| {
            assert_eq!(r, 0.1);
            Ok(())
        },
        never
    )
    .is_ok());
    // A released cluster's evictions ask no bucket (no ceiling set).
    assert!(admit_in(&v.region("a"), grace, at(100), released, never, never).is_ok());
    // Pacing off: no bucket at all.
    let off = BrakeSettings {
        rate_limit: false,
        ..settings()
    };
    let v = fleet_view(fleet(&[("a", 3, 1)]), &off, at(0), at(100));
    assert!(admit_in(&v.region("a"), grace, at(100), token, never, never).is_ok());
    // The ceiling, when set, is asked after the cluster's token.
    let ceiling = BrakeSettings {
        resource_rate: Some(2.0),
        ..settings()
    };
    let v = fleet_view(fleet(&[("a", 3, 1)]), &ceiling, at(0), at(100));
    let h = admit_in(
        &v.region("a"),
        grace,
        at(100),
        token,
        |_| Ok(()),
        |r| {
            assert_eq!(r, 2.0);
            Err(Duration::from_millis(500))
        },
    )
    .unwrap_err();
    assert_eq!(h.reason, HoldReason::ResourceRateLimited);
}

mod shared {
    use super::*;
    use flotilla_api::cluster::Cluster;
    use Cause::*;

    /// `spec`: (name, region); `down`: the names that are not Ready and tainted NoExecute.
    fn clusters(spec: &[(&str, &str)], down: &[&str]) -> Clusters {
        let by_name = spec
            .iter()
            .map(|&(name, region)| {
                let failed = down.contains(&name);
                let status = if failed { "Unknown" } else { "True" };
                let taints = if failed {
                    serde_json::json!([{"key": "cluster.karmada.io/unreachable", "effect": "NoExecute"}])
                } else {
                    serde_json::json!([])
                };
                let c: Cluster = serde_json::from_value(serde_json::json!({
                    "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": name},
                    "spec": {"syncMode": "Pull", "region": region, "taints": taints},
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

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Want {
        Go,
        /// Held for this reason, asked again after about this many ms.
        Wait(HoldReason, u64),
    }
    use Want::*;

    /// At `at` seconds after the start, with `down` failed, the evictions asked (binding,
    /// cluster, cause) and what each gets.
    struct Step {
        at: i64,
        down: &'static [&'static str],
        asks: Vec<(&'static str, &'static str, Cause, Want)>,
    }

    fn five_in_a() -> Vec<(&'static str, &'static str)> {
        vec![
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("a4", "a"),
            ("a5", "a"),
        ]
    }

    fn run(case: &str, settings: BrakeSettings, fleet: &[(&str, &str)], steps: Vec<Step>) {
        let brake = EvictionBrake::new(settings, at(0), None);
        for step in steps {
            let cs = clusters(fleet, step.down);
            let now = at(step.at);
            // A producer's look at a binding with nothing to evict.
            hold_back(Some(&brake), &cs, "rb|x|0", Cause::ClusterFailure, [], now);
            for (binding, cluster, cause, want) in step.asks {
                let got = hold_back(Some(&brake), &cs, binding, cause, [cluster], now)
                    .remove(cluster)
                    .map_or(Go, |h| Wait(h.reason, h.wait.as_millis() as u64));
                assert_eq!(
                    got, want,
                    "{case}: at {}s, {binding} from {cluster} ({cause:?})",
                    step.at
                );
            }
        }
    }

    #[test]
    fn the_brake_paces_failed_clusters_not_bindings() {
        use HoldReason::*;
        let s = settings;
        // (case, settings, fleet, steps)
        type Fleet = Vec<(&'static str, &'static str)>;
        let table: Vec<(&str, BrakeSettings, Fleet, Vec<Step>)> = vec![
            (
                "one cluster fails: all its bindings go at once",
                s(),
                five_in_a(),
                vec![Step {
                    at: 100,
                    down: &["a1"],
                    asks: (0..50)
                        .map(|i| -> (&'static str, &'static str, Cause, Want) {
                            (Box::leak(format!("rb|x|{i}").into_boxed_str()), "a1", ClusterFailure, Go)
                        })
                        .collect(),
                }],
            ),
            (
                "two fail 2 s apart in one region: the second waits its token",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Go)],
                    },
                    Step {
                        at: 102,
                        down: &["a1", "a2"],
                        asks: vec![
                            ("rb|x|2", "a2", ClusterFailure, Wait(RateLimited, 8_000)),
                            ("rb|x|3", "a2", ClusterFailure, Wait(RateLimited, 8_000)),
                            // The first one's bindings still go.
                            ("rb|x|4", "a1", ClusterFailure, Go),
                        ],
                    },
                    Step {
                        at: 110,
                        down: &["a1", "a2"],
                        asks: vec![
                            ("rb|x|3", "a2", ClusterFailure, Go),
                            ("rb|x|2", "a2", ClusterFailure, Go),
                            ("rb|x|5", "a2", ClusterFailure, Go),
                        ],
                    },
                ],
            ),
            (
                "another region's failure does not wait",
                s(),
                vec![("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("b2", "b"), ("b3", "b")],
                vec![Step {
                    at: 100,
                    down: &["a1", "b1"],
                    asks: vec![
                        ("rb|x|1", "a1", ClusterFailure, Go),
                        ("rb|x|1", "b1", ClusterFailure, Go),
                    ],
                }],
            ),
            (
                "a region over the threshold lets one cluster out per 100 s",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1", "a2", "a3", "a4"],
                        asks: vec![
                            ("rb|x|1", "a1", ClusterFailure, Go),
                            ("rb|x|2", "a1", ClusterFailure, Go),
                            ("rb|x|1", "a2", ClusterFailure, Wait(RateLimited, 100_000)),
                            ("rb|x|1", "a3", ClusterFailure, Wait(RateLimited, 200_000)),
                            // A cluster that waits keeps its place.
                            ("rb|x|2", "a2", ClusterFailure, Wait(RateLimited, 100_000)),
                        ],
                    },
                    Step {
                        at: 200,
                        down: &["a1", "a2", "a3", "a4"],
                        asks: vec![
                            ("rb|x|2", "a2", ClusterFailure, Go),
                            ("rb|x|1", "a3", ClusterFailure, Wait(RateLimited, 100_000)),
                        ],
                    },
                ],
            ),
            (
                "a region sliding into PartialDisruption right after a release lets no second one out at once",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Go)],
                    },
                    Step {
                        at: 101,
                        down: &["a1", "a2", "a3"],
                        asks: vec![("rb|x|1", "a2", ClusterFailure, Wait(RateLimited, 100_000))],
                    },
                ],
            ),
            (
                "the whole fleet down: nothing, released or not; then the clusters queue again",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Go)],
                    },
                    Step {
                        at: 200,
                        down: &["a1", "a2", "a3", "a4", "a5"],
                        asks: vec![
                            ("rb|x|2", "a1", ClusterFailure, Wait(FullDisruption, 10_000)),
                            ("rb|x|1", "a2", ClusterFailure, Wait(FullDisruption, 10_000)),
                            ("rb|x|1", "a3", ApplicationFailure, Wait(FullDisruption, 10_000)),
                        ],
                    },
                    Step {
                        at: 300,
                        down: &["a1", "a2"],
                        asks: vec![
                            ("rb|x|2", "a2", ClusterFailure, Go),
                            ("rb|x|2", "a1", ClusterFailure, Wait(RateLimited, 10_000)),
                        ],
                    },
                ],
            ),
            (
                "a restart: nothing within the startup grace, then the first cluster at once",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 10,
                        down: &["a1", "a2"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Wait(StartupGrace, 30_000))],
                    },
                    Step {
                        at: 40,
                        down: &["a1", "a2"],
                        asks: vec![
                            ("rb|x|1", "a1", ClusterFailure, Go),
                            ("rb|x|2", "a1", ClusterFailure, Go),
                            ("rb|x|1", "a2", ClusterFailure, Wait(RateLimited, 10_000)),
                        ],
                    },
                ],
            ),
            (
                "a failed application on a Ready cluster goes at once, never behind an evacuation",
                s(),
                five_in_a(),
                vec![Step {
                    at: 100,
                    down: &["a1", "a2"],
                    asks: vec![
                        ("rb|x|1", "a1", ClusterFailure, Go),
                        ("rb|x|1", "a2", ClusterFailure, Wait(RateLimited, 10_000)),
                        ("rb|x|2", "a3", ApplicationFailure, Go),
                        ("rb|x|3", "a3", ApplicationFailure, Go),
                        // On a failed cluster, it is the cluster's turn that counts.
                        ("rb|x|4", "a2", ApplicationFailure, Wait(RateLimited, 10_000)),
                        ("rb|x|5", "a1", ApplicationFailure, Go),
                    ],
                }],
            ),
            (
                "a cluster that recovered queues again when it fails again",
                s(),
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Go)],
                    },
                    Step {
                        at: 104,
                        down: &[],
                        asks: vec![],
                    },
                    Step {
                        at: 105,
                        down: &["a1"],
                        asks: vec![("rb|x|1", "a1", ClusterFailure, Wait(RateLimited, 5_000))],
                    },
                ],
            ),
            (
                "the --resource-eviction-rate ceiling paces a released cluster's bindings, not applications",
                BrakeSettings {
                    resource_rate: Some(2.0),
                    ..s()
                },
                five_in_a(),
                vec![Step {
                    at: 100,
                    down: &["a1"],
                    asks: vec![
                        ("rb|x|1", "a1", ClusterFailure, Go),
                        ("rb|x|2", "a1", ClusterFailure, Wait(ResourceRateLimited, 500)),
                        ("rb|x|3", "a1", ClusterFailure, Wait(ResourceRateLimited, 1_000)),
                        ("rb|x|4", "a3", ApplicationFailure, Go),
                    ],
                }],
            ),
            (
                "pacing off: every failed cluster at once; the stops stay",
                BrakeSettings {
                    rate_limit: false,
                    ..s()
                },
                five_in_a(),
                vec![
                    Step {
                        at: 100,
                        down: &["a1", "a2", "a3", "a4"],
                        asks: vec![
                            ("rb|x|1", "a1", ClusterFailure, Go),
                            ("rb|x|1", "a2", ClusterFailure, Go),
                            ("rb|x|1", "a3", ClusterFailure, Go),
                        ],
                    },
                    Step {
                        at: 101,
                        down: &["a1", "a2", "a3", "a4", "a5"],
                        asks: vec![("rb|x|1", "a4", ClusterFailure, Wait(FullDisruption, 10_000))],
                    },
                ],
            ),
            (
                "a rate of 0 stops failed clusters, not failed applications on Ready ones",
                BrakeSettings {
                    cluster_rate: 0.0,
                    ..s()
                },
                five_in_a(),
                vec![Step {
                    at: 100,
                    down: &["a1"],
                    asks: vec![
                        ("rb|x|1", "a1", ClusterFailure, Wait(RateZero, 10_000)),
                        ("rb|x|1", "a2", ApplicationFailure, Go),
                    ],
                }],
            ),
        ];
        for (case, settings, fleet, steps) in table {
            run(case, settings, &fleet, steps);
        }
    }

    /// Evictions of one failed cluster asked for at once, from many threads: the cluster
    /// takes one token and every one of them goes (none waits a turn because another
    /// took the token between its look and its take).
    #[test]
    fn evictions_of_one_cluster_asked_at_once_all_go() {
        for round in 0..50 {
            let brake = EvictionBrake::new(settings(), at(0), None);
            let fleet = five_in_a();
            let cs = clusters(&fleet, &["a1"]);
            let now = at(100);
            let v = brake.view(&cs, now);
            let held: Vec<String> = std::thread::scope(|scope| {
                let asks: Vec<_> = (0..8)
                    .map(|i| {
                        let (brake, cs, v) = (&brake, &cs, &v);
                        scope.spawn(move || {
                            let binding = format!("rb|x|{i}");
                            let ask = Ask {
                                binding: &binding,
                                cluster: "a1",
                                cause: ClusterFailure,
                            };
                            brake
                                .admit(v, cs, ask, now)
                                .err()
                                .map(|h| format!("{i}: {h:?}"))
                        })
                    })
                    .collect();
                asks.into_iter().filter_map(|a| a.join().unwrap()).collect()
            });
            assert!(held.is_empty(), "round {round}: {held:?}");
        }
    }

    #[tokio::test]
    async fn clones_share_the_turns_and_the_report_and_metrics_say_so() {
        let registry = prometheus::Registry::new();
        let metrics = FailoverMetrics::register(&registry).unwrap();
        let brake = EvictionBrake::new(settings(), at(0), Some(metrics.clone()));
        let other = brake.clone();
        let fleet = five_in_a();
        let cs = clusters(&fleet, &["a1", "a2"]);
        let now = at(100);
        let ask = |cluster, cause| Ask {
            binding: "rb|x|1",
            cluster,
            cause,
        };
        let v = brake.view(&cs, now);
        assert!(brake.admit(&v, &cs, ask("a1", ClusterFailure), now).is_ok());
        let h = other
            .admit(&v, &cs, ask("a2", ClusterFailure), now)
            .unwrap_err();
        assert_eq!(h.reason, HoldReason::RateLimited);
        assert!(other.is_released("a1") && !brake.is_released("a2"));
        let report = brake.report(&cs, now);
        let a = report.iter().find(|r| r.view.region == "a").unwrap();
        assert_eq!(
            a.released,
            vec![ClusterTurn {
                cluster: "a1".into(),
                at: now
            }]
        );
        assert_eq!(
            a.queued,
            vec![ClusterTurn {
                cluster: "a2".into(),
                at: now + chrono::Duration::seconds(10)
            }]
        );
        assert_eq!(a.held, 1);
        assert_eq!(metrics.brake_rate.with_label_values(&["a"]).get(), 0.1);
        assert_eq!(metrics.clusters_released.with_label_values(&["a"]).get(), 1);
        assert_eq!(metrics.clusters_queued.with_label_values(&["a"]).get(), 1);
        assert_eq!(
            metrics
                .evictions_held
                .with_label_values(&["a", "RateLimited"])
                .get(),
            1
        );
        // a2 recovers while it waits: it waits no more, and a1 recovers: it is no longer out.
        let healthy = clusters(&fleet, &[]);
        let report = brake.report(&healthy, now);
        let a = report.iter().find(|r| r.view.region == "a").unwrap();
        assert!(a.released.is_empty() && a.queued.is_empty(), "{a:?}");
        assert_eq!(metrics.clusters_queued.with_label_values(&["a"]).get(), 0);
    }
}
