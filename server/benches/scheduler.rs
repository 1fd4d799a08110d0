//! Scheduler benchmark (plain `main`, no harness): schedules 100k bindings across 1,000
//! clusters and reports bindings/s and per-binding latency (p50, p99, max). Half the bindings
//! are Divided by dynamic weight with a cluster spread constraint (3–5 clusters), a label
//! affinity matching half the fleet, cpu/memory requests, and for every other one a previous
//! result to scale up from; the other half are Duplicated over the ~50 clusters of one tier
//! with the default tolerations. 2% of the clusters carry an untolerated NoSchedule taint.
//!
//! Run: `cargo bench -p flotilla-server --bench scheduler` (release). `SCHED_BENCH_BINDINGS`
//! (default 100000) and `SCHED_BENCH_CLUSTERS` (default 1000) change the sizes,
//! `SCHED_BENCH_THREADS` (default 1,2) the thread counts measured. Figures go to
//! docs/scheduling-algorithms.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use flotilla_api::binding::{
    ObjectReference, ReplicaRequirements, ResourceBindingSpec, ResourceBindingStatus, TargetCluster,
};
use flotilla_api::cluster::{
    ApiEnablement, ApiResource, Cluster, ClusterSpec, ResourceSummary, Taint, TaintEffect,
};
use flotilla_api::defaulting::{default_placement, DefaultingConfig};
use flotilla_api::policy::{
    ClusterAffinity, ClusterPreferences, DynamicWeightFactor, Placement, ReplicaDivisionPreference,
    ReplicaSchedulingStrategy, ReplicaSchedulingType, SpreadByField, SpreadConstraint,
};
use flotilla_api::quantity::ResourceList;
use flotilla_api::selector::LabelSelector;
use flotilla_api::Quantity;
use flotilla_server::scheduler::{schedule, ClusterSnapshot, ScheduleInput, ScheduleOptions};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn list(pairs: &[(&str, String)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
        .collect()
}

fn clusters(n: usize) -> Vec<Cluster> {
    (0..n)
        .map(|i| {
            let mut c = Cluster::new(
                &format!("member-{i:04}"),
                ClusterSpec {
                    provider: ["aws", "gcp", "azure"][i % 3].to_string(),
                    region: format!("region-{}", i % 10),
                    zones: vec![format!("region-{}-{}", i % 10, i % 3)],
                    ..Default::default()
                },
            );
            c.metadata
                .labels
                .insert("env".into(), if i % 2 == 0 { "prod" } else { "dev" }.into());
            if i % 20 == 0 {
                c.metadata.labels.insert("tier".into(), "gold".into());
            }
            if i % 50 == 7 {
                c.spec.taints.push(Taint {
                    key: "dedicated".into(),
                    value: "batch".into(),
                    effect: TaintEffect::NoSchedule,
                    time_added: None,
                });
            }
            c.status.api_enablements = vec![ApiEnablement {
                group_version: "apps/v1".into(),
                resources: vec![
                    ApiResource {
                        name: "deployments".into(),
                        kind: "Deployment".into(),
                    },
                    ApiResource {
                        name: "statefulsets".into(),
                        kind: "StatefulSet".into(),
                    },
                ],
            }];
            let cpu = 64 + (i % 7) * 16;
            c.status.resource_summary = Some(ResourceSummary {
                allocatable: list(&[
                    ("cpu", cpu.to_string()),
                    ("memory", format!("{}Gi", cpu * 4)),
                    ("pods", "1100".into()),
                ]),
                allocated: list(&[
                    ("cpu", format!("{}m", (i * 7919) % (cpu * 500))),
                    ("memory", "20Gi".into()),
                    ("pods", format!("{}", i % 300)),
                ]),
                ..Default::default()
            });
            c
        })
        .collect()
}

fn resource(i: usize) -> ObjectReference {
    ObjectReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: format!("ns-{}", i % 100),
        name: format!("app-{i}"),
        uid: format!("00000000-0000-4000-8000-{i:012}"),
        ..Default::default()
    }
}

fn divided(i: usize, clusters: usize) -> ResourceBindingSpec {
    let mut placement = Placement {
        cluster_affinity: Some(ClusterAffinity {
            label_selector: Some(LabelSelector::from_labels([("env", "prod")])),
            ..Default::default()
        }),
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: Some(SpreadByField::Cluster),
            min_groups: 3,
            max_groups: 5,
            ..Default::default()
        }],
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Divided),
            replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
            weight_preference: Some(ClusterPreferences {
                dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    default_placement(&mut placement, &DefaultingConfig::default());
    let replicas = 10 + (i % 20) as i32;
    let previous = if i.is_multiple_of(4) {
        // Scale-up after an eviction: two of the three previous clusters remain.
        let a = (i * 2) % clusters / 2 * 2;
        vec![
            TargetCluster::new(&format!("member-{a:04}"), replicas / 3),
            TargetCluster::new(&format!("member-{:04}", (a + 2) % clusters), replicas / 3),
        ]
    } else {
        Vec::new()
    };
    ResourceBindingSpec {
        resource: resource(i),
        replicas,
        replica_requirements: Some(ReplicaRequirements {
            resource_request: list(&[("cpu", "500m".into()), ("memory", "512Mi".into())]),
            ..Default::default()
        }),
        placement: Some(placement),
        clusters: previous,
        ..Default::default()
    }
}

fn duplicated(i: usize) -> ResourceBindingSpec {
    let mut placement = Placement {
        cluster_affinity: Some(ClusterAffinity {
            label_selector: Some(LabelSelector::from_labels([("tier", "gold")])),
            ..Default::default()
        }),
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated),
            ..Default::default()
        }),
        ..Default::default()
    };
    default_placement(&mut placement, &DefaultingConfig::default());
    ResourceBindingSpec {
        resource: resource(i),
        replicas: 3,
        placement: Some(placement),
        ..Default::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Run {
    wall: Duration,
    latencies: Vec<Duration>,
    ok: usize,
    placed: usize,
}

fn measure(specs: &[ResourceBindingSpec], snap: &ClusterSnapshot, threads: usize) -> Run {
    let status = ResourceBindingStatus::default();
    let chunk = specs.len().div_ceil(threads);
    let start = Instant::now();
    let parts: Vec<(Vec<Duration>, usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .chunks(chunk)
            .map(|part| {
                let status = &status;
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(part.len());
                    let (mut ok, mut placed) = (0, 0);
                    for spec in part {
                        let t = Instant::now();
                        let r = schedule(&ScheduleInput {
                            spec,
                            status,
                            clusters: snap,
                            options: ScheduleOptions::default(),
                            blocked: &[],
                        });
                        lat.push(t.elapsed());
                        if let Ok(out) = r {
                            ok += 1;
                            placed += out.clusters.len();
                        }
                    }
                    (lat, ok, placed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = start.elapsed();
    let mut latencies = Vec::with_capacity(specs.len());
    let (mut ok, mut placed) = (0, 0);
    for (l, o, p) in parts {
        latencies.extend(l);
        ok += o;
        placed += p;
    }
    latencies.sort();
    Run {
        wall,
        latencies,
        ok,
        placed,
    }
}

fn report(name: &str, threads: usize, run: &Run) {
    let n = run.latencies.len();
    println!(
        "{name:<22} threads={threads} bindings={n} ok={} avg_clusters={:.1} | {:>8.0} bindings/s | p50 {:>7.1} µs | p99 {:>7.1} µs | max {:>8.1} µs",
        run.ok,
        run.placed as f64 / run.ok.max(1) as f64,
        n as f64 / run.wall.as_secs_f64(),
        percentile(&run.latencies, 0.50).as_secs_f64() * 1e6,
        percentile(&run.latencies, 0.99).as_secs_f64() * 1e6,
        run.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e6),
    );
}

fn main() {
    let n_bindings = env_usize("SCHED_BENCH_BINDINGS", 100_000);
    let n_clusters = env_usize("SCHED_BENCH_CLUSTERS", 1000);
    let threads: Vec<usize> = std::env::var("SCHED_BENCH_THREADS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();

    let fleet = clusters(n_clusters);
    let t = Instant::now();
    let snap = ClusterSnapshot::new(&fleet);
    println!(
        "snapshot of {n_clusters} clusters built in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let mixed: Vec<ResourceBindingSpec> = (0..n_bindings)
        .map(|i| {
            if i % 2 == 0 {
                divided(i, n_clusters)
            } else {
                duplicated(i)
            }
        })
        .collect();
    let only_divided: Vec<ResourceBindingSpec> = mixed.iter().step_by(2).cloned().collect();
    let only_duplicated: Vec<ResourceBindingSpec> =
        mixed.iter().skip(1).step_by(2).cloned().collect();

    // Warm-up.
    let _ = measure(&mixed[..n_bindings.min(2000)], &snap, 1);
    for &t in &threads {
        report("mixed (50/50)", t, &measure(&mixed, &snap, t));
    }
    report("divided+spread only", 1, &measure(&only_divided, &snap, 1));
    report("duplicated only", 1, &measure(&only_duplicated, &snap, 1));
}
