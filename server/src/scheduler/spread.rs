//! Which feasible clusters are selected (docs/semantics.md §8.3): candidates ordered by
//! overflow tier, score, available replicas and name; then all of them, or a subset chosen by
//! the spread constraints along the cluster path or the region path (which picks regions with
//! [`select_groups`] by their group score).
//!
//! All candidates are selected when there is no spread constraint, or when the division is by
//! static weight (spread constraints are ignored then). With a `region` constraint the region
//! path runs, else with a `cluster` constraint the cluster path, else scheduling fails ("just
//! support cluster and region spread constraint").

use std::cmp::Ordering;

use flotilla_api::policy::{SpreadByField, SpreadConstraint};

use super::snapshot::ClusterInfo;

/// Weight unit of group scores: capacity counts first, average cluster score second.
const WEIGHT_UNIT: i64 = 1000;

/// A feasible cluster with what selection and division need.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// The cluster.
    pub info: &'a ClusterInfo,
    /// Sum of the score plugins.
    pub score: i64,
    /// What the estimator says the cluster can still take.
    pub allocatable: i64,
    /// `allocatable` plus the replicas the previous result gave it.
    pub available: i64,
    /// Overflow tier: 0 for the primary affinity, i for the i-th overflow tier.
    pub tier: u32,
}

/// Karmada's candidate order: tier ascending, score descending, available replicas
/// descending, name ascending.
pub fn candidate_order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    a.tier
        .cmp(&b.tier)
        .then_with(|| b.score.cmp(&a.score))
        .then_with(|| b.available.cmp(&a.available))
        // Snapshot order is name order.
        .then_with(|| a.info.index.cmp(&b.info.index))
}

/// What selection needs from the placement.
#[derive(Clone, Copy, Debug)]
pub struct SelectionRules<'p> {
    /// `placement.spreadConstraints`.
    pub constraints: &'p [SpreadConstraint],
    /// Spread constraints are ignored (static-weight division).
    pub ignore_spread: bool,
    /// Replicas that must fit in the selected clusters, or `None` when capacity is not
    /// considered (Duplicated).
    pub need_replicas: Option<i64>,
    /// `spec.replicas` (for the group score).
    pub replicas: i64,
    /// Duplicated scheduling (for the group score).
    pub duplicated: bool,
}

/// A group (region) offered to [`select_groups`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group<'a> {
    /// Group name.
    pub name: &'a str,
    /// How many clusters it holds.
    pub value: i64,
    /// Its group score.
    pub weight: i64,
}

#[derive(Clone, Debug)]
struct Path {
    id: usize,
    groups: Vec<usize>,
    weight: i64,
    value: i64,
}

/// Karmada's `selectGroups`: every combination (explored depth-first over groups sorted by
/// value ascending, weight descending, name) whose total value reaches `target` with between
/// `min` and `max` groups is feasible; the best has the largest total weight, then value, then
/// was found first — unless a shorter feasible path that sorts later is a prefix of it, which
/// then wins (repeatedly). Returns the chosen groups by weight descending, then name.
pub fn select_groups<'a>(groups: &[Group<'a>], min: i64, max: i64, target: i64) -> Vec<Group<'a>> {
    let mut sorted: Vec<Group<'a>> = groups.to_vec();
    sorted.sort_by(|a, b| {
        a.value
            .cmp(&b.value)
            .then_with(|| b.weight.cmp(&a.weight))
            .then_with(|| a.name.cmp(b.name))
    });
    let by_weight = |list: &mut Vec<usize>, sorted: &[Group<'a>]| {
        list.sort_by(|&x, &y| {
            sorted[y]
                .weight
                .cmp(&sorted[x].weight)
                .then_with(|| sorted[x].name.cmp(sorted[y].name))
        })
    };
    let mut paths: Vec<Path> = Vec::new();
    let n = sorted.len();
    if i64::try_from(n).is_ok_and(|n| n == min) {
        // Only the combination of every group can be long enough.
        let value: i64 = sorted.iter().map(|g| g.value).sum();
        if value >= target && min <= max {
            let mut all: Vec<usize> = (0..n).collect();
            by_weight(&mut all, &sorted);
            paths.push(Path {
                id: 1,
                weight: sorted.iter().map(|g| g.weight).sum(),
                value,
                groups: all,
            });
        }
    } else {
        let mut stack: Vec<usize> = Vec::new();
        dfs(
            &sorted, min, max, target, 0, 0, &mut stack, &mut paths, &by_weight,
        );
    }
    if paths.is_empty() {
        return Vec::new();
    }
    paths.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then_with(|| b.value.cmp(&a.value))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut best = 0;
    for i in 1..paths.len() {
        let (p, sub) = (&paths[best], &paths[i]);
        if sub.groups.len() < p.groups.len()
            && sub
                .groups
                .iter()
                .zip(&p.groups)
                .all(|(a, b)| sorted[*a].name == sorted[*b].name)
        {
            best = i;
        }
    }
    paths[best]
        .groups
        .iter()
        .map(|&i| sorted[i].clone())
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn dfs<'a>(
    groups: &[Group<'a>],
    min: i64,
    max: i64,
    target: i64,
    sum: i64,
    begin: usize,
    stack: &mut Vec<usize>,
    paths: &mut Vec<Path>,
    by_weight: &dyn Fn(&mut Vec<usize>, &[Group<'a>]),
) {
    let len = i64::try_from(stack.len()).unwrap_or(i64::MAX);
    if sum >= target && len >= min && len <= max {
        let mut chosen = stack.clone();
        by_weight(&mut chosen, groups);
        paths.push(Path {
            id: paths.len() + 1,
            weight: stack.iter().map(|&i| groups[i].weight).sum(),
            value: stack.iter().map(|&i| groups[i].value).sum(),
            groups: chosen,
        });
        return;
    }
    if len >= max {
        return;
    }
    for i in begin..groups.len() {
        stack.push(i);
        dfs(
            groups,
            min,
            max,
            target,
            sum + groups[i].value,
            i + 1,
            stack,
            paths,
            by_weight,
        );
        stack.pop();
    }
}

/// Karmada's group score (`calcGroupScore`) of a region whose clusters are in candidate
/// order. Duplicated: clusters able to run every replica count in thousands, plus their
/// average score. Divided: the capacity towards `ceil(replicas / minGroups)` (walking clusters
/// until at least `max(cluster minGroups, minGroups)` are taken and the target is covered)
/// counts in thousands, plus the average score.
pub fn group_score(
    clusters: &[&Candidate<'_>],
    rules: &SelectionRules<'_>,
    group_min: i64,
    cluster_min: i64,
) -> i64 {
    if clusters.is_empty() {
        return 0;
    }
    if rules.duplicated {
        let valid: Vec<_> = clusters
            .iter()
            .filter(|c| c.available >= rules.replicas)
            .collect();
        if valid.is_empty() {
            return 0;
        }
        let n = valid.len() as i64;
        return n * WEIGHT_UNIT + valid.iter().map(|c| c.score).sum::<i64>() / n;
    }
    let min = group_min.max(1);
    let target = (rules.replicas + min - 1).div_euclid(min);
    let needed = cluster_min.max(min);
    let (mut avail, mut score, mut count) = (0i64, 0i64, 0i64);
    for c in clusters {
        avail = avail.saturating_add(c.available);
        score += c.score;
        count += 1;
        if count >= needed && avail >= target {
            break;
        }
    }
    if avail < target {
        avail.saturating_mul(WEIGHT_UNIT) + score / clusters.len() as i64
    } else {
        target.saturating_mul(WEIGHT_UNIT) + score / count
    }
}

fn constraint_for(
    constraints: &[SpreadConstraint],
    field: SpreadByField,
) -> Option<&SpreadConstraint> {
    // Karmada keeps the last constraint per field.
    constraints
        .iter()
        .rev()
        .find(|c| c.spread_by_field == Some(field))
}

/// Selects among `candidates` (already in [`candidate_order`]); returns indices into it in
/// selection order, or the scheduling error's message.
pub fn select(
    candidates: &[Candidate<'_>],
    rules: &SelectionRules<'_>,
    trace: &mut Vec<String>,
) -> Result<Vec<usize>, String> {
    if rules.constraints.is_empty() || rules.ignore_spread {
        trace.push(if rules.constraints.is_empty() {
            format!("selection: no spread constraint, all {} feasible cluster(s) selected", candidates.len())
        } else {
            format!(
                "selection: static-weight division ignores spread constraints, all {} feasible cluster(s) selected",
                candidates.len()
            )
        });
        return Ok((0..candidates.len()).collect());
    }
    let cluster_c = constraint_for(rules.constraints, SpreadByField::Cluster);
    if let Some(region_c) = constraint_for(rules.constraints, SpreadByField::Region) {
        return select_by_region(candidates, rules, region_c, cluster_c, trace);
    }
    match cluster_c {
        Some(c) => select_by_cluster(candidates, rules, c, trace),
        None => Err("just support cluster and region spread constraint".to_string()),
    }
}

fn names(candidates: &[Candidate<'_>], picked: &[usize]) -> String {
    picked
        .iter()
        .filter_map(|&i| candidates.get(i))
        .map(|c| {
            format!(
                "{} (score {}, available {})",
                c.info.name, c.score, c.available
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn select_by_cluster(
    candidates: &[Candidate<'_>],
    rules: &SelectionRules<'_>,
    c: &SpreadConstraint,
    trace: &mut Vec<String>,
) -> Result<Vec<usize>, String> {
    let total = candidates.len() as i64;
    if total < c.min_groups {
        trace.push(format!(
            "selection by cluster: {total} feasible cluster(s) < minGroups {}",
            c.min_groups
        ));
        return Err(
            "the number of feasible clusters is less than spreadConstraint.MinGroups".to_string(),
        );
    }
    let n = usize::try_from(total.min(c.max_groups).max(0)).unwrap_or(0);
    let mut picked: Vec<usize> = (0..n).collect();
    match rules.need_replicas {
        None => {
            trace.push(format!(
                "selection by cluster (minGroups {}, maxGroups {}): the first {n}: {}",
                c.min_groups,
                c.max_groups,
                names(candidates, &picked)
            ));
        }
        Some(need) => {
            let avail = |p: &[usize]| p.iter().map(|&i| candidates[i].available).sum::<i64>();
            let mut rest: Vec<usize> = (n..candidates.len()).collect();
            let mut slot = n;
            while avail(&picked) < need && slot > 0 {
                slot -= 1;
                let current = candidates[picked[slot]].available;
                let mut best: Option<(usize, i64)> = None;
                for (j, &r) in rest.iter().enumerate() {
                    let a = candidates[r].available;
                    if a > best.map_or(current, |b| b.1) {
                        best = Some((j, a));
                    }
                }
                if let Some((j, _)) = best {
                    std::mem::swap(&mut picked[slot], &mut rest[j]);
                }
            }
            if avail(&picked) < need {
                trace.push(format!(
                    "selection by cluster (minGroups {}, maxGroups {}): the best {n} cluster(s) hold {} available replica(s) < {need}",
                    c.min_groups,
                    c.max_groups,
                    avail(&picked)
                ));
                return Err(format!("no enough resource when selecting {n} clusters"));
            }
            trace.push(format!(
                "selection by cluster (minGroups {}, maxGroups {}), {need} replica(s) must fit: {}",
                c.min_groups,
                c.max_groups,
                names(candidates, &picked)
            ));
        }
    }
    Ok(picked)
}

fn select_by_region(
    candidates: &[Candidate<'_>],
    rules: &SelectionRules<'_>,
    region_c: &SpreadConstraint,
    cluster_c: Option<&SpreadConstraint>,
    trace: &mut Vec<String>,
) -> Result<Vec<usize>, String> {
    let (cluster_min, cluster_max) = cluster_c.map_or((0, 0), |c| (c.min_groups, c.max_groups));
    // Regions with their clusters, in candidate order.
    let mut regions: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        if c.info.region.is_empty() {
            continue;
        }
        match regions.iter_mut().find(|(r, _)| *r == c.info.region) {
            Some((_, list)) => list.push(i),
            None => regions.push((&c.info.region, vec![i])),
        }
    }
    if (regions.len() as i64) < region_c.min_groups {
        trace.push(format!(
            "selection by region: {} feasible region(s) < minGroups {}",
            regions.len(),
            region_c.min_groups
        ));
        return Err(
            "the number of feasible region is less than spreadConstraint.MinGroups".to_string(),
        );
    }
    let groups: Vec<Group<'_>> = regions
        .iter()
        .map(|(name, list)| {
            let members: Vec<&Candidate<'_>> = list.iter().map(|&i| &candidates[i]).collect();
            Group {
                name,
                value: list.len() as i64,
                weight: group_score(&members, rules, region_c.min_groups, cluster_min),
            }
        })
        .collect();
    trace.push(format!(
        "regions (clusters, group score): {}",
        groups
            .iter()
            .map(|g| format!("{} ({}, {})", g.name, g.value, g.weight))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let chosen = select_groups(
        &groups,
        region_c.min_groups,
        region_c.max_groups,
        cluster_min,
    );
    if chosen.is_empty() {
        trace.push(format!(
            "no combination of {}..{} region(s) holds {cluster_min} cluster(s)",
            region_c.min_groups, region_c.max_groups
        ));
        return Err(
            "the number of clusters is less than the cluster spreadConstraint.MinGroups"
                .to_string(),
        );
    }
    let mut picked = Vec::new();
    let mut pool = Vec::new();
    for g in &chosen {
        if let Some((_, list)) = regions.iter().find(|(r, _)| *r == g.name) {
            if let Some((first, others)) = list.split_first() {
                picked.push(*first);
                pool.extend_from_slice(others);
            }
        }
    }
    let total = (picked.len() + pool.len()) as i64;
    let need = total.min(cluster_max);
    let rest = usize::try_from(need - picked.len() as i64).unwrap_or(0);
    pool.sort_unstable();
    picked.extend(pool.into_iter().take(rest));
    trace.push(format!(
        "selection by region: regions {} (best cluster of each, then the best others up to cluster maxGroups {cluster_max}): {}",
        chosen.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
        names(candidates, &picked)
    ));
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::snapshot::ClusterSnapshot;
    use flotilla_api::cluster::{Cluster, ClusterSpec};

    fn g<'a>(name: &'a str, value: i64, weight: i64) -> Group<'a> {
        Group {
            name,
            value,
            weight,
        }
    }

    type GroupsRow<'a> = (&'a str, Vec<Group<'a>>, i64, i64, i64, &'a [&'a str]);

    #[test]
    fn select_groups_table() {
        let rows: Vec<GroupsRow> = vec![
            (
                "karmada tree example, exactly two",
                vec![g("g2", 2, 0), g("g3", 3, 0), g("g6", 6, 0), g("g7", 7, 0)],
                2,
                2,
                7,
                // Feasible: [2,6] [2,7] [3,6] [3,7] [6,7]; equal weight, largest value wins.
                &["g6", "g7"],
            ),
            (
                "heavier weight wins over value",
                vec![g("a", 1, 100), g("b", 5, 10), g("c", 5, 20)],
                1,
                1,
                1,
                &["a"],
            ),
            (
                "target needs two",
                vec![g("a", 1, 100), g("b", 1, 90), g("c", 3, 10)],
                1,
                3,
                2,
                // [a,b] weight 190 beats [c] 10 and [a,c] 110.
                &["a", "b"],
            ),
            ("infeasible", vec![g("a", 1, 1), g("b", 1, 1)], 1, 2, 3, &[]),
            (
                "as many groups as minGroups",
                vec![g("a", 1, 1), g("b", 1, 5)],
                2,
                3,
                2,
                &["b", "a"],
            ),
            ("maxGroups 0", vec![g("a", 5, 1)], 0, 0, 1, &[]),
            (
                "a shorter prefix path wins",
                // [x,y] (sorted y,x; weight 60) beats [y] (50), but [y] is its prefix.
                vec![g("x", 1, 10), g("y", 2, 50)],
                1,
                2,
                2,
                &["y"],
            ),
        ];
        for (name, groups, min, max, target, want) in rows {
            let got: Vec<&str> = select_groups(&groups, min, max, target)
                .iter()
                .map(|g| g.name)
                .collect();
            assert_eq!(got, want.to_vec(), "{name}");
        }
    }

    fn snapshot(spec: &[(&str, &str)]) -> ClusterSnapshot {
        let clusters: Vec<Cluster> = spec
            .iter()
            .map(|(n, r)| {
                Cluster::new(
                    n,
                    ClusterSpec {
                        region: r.to_string(),
                        ..Default::default()
                    },
                )
            })
            .collect();
        ClusterSnapshot::new(&clusters)
    }

    fn candidates<'a>(snap: &'a ClusterSnapshot, rows: &[(&str, i64, i64)]) -> Vec<Candidate<'a>> {
        let mut out: Vec<Candidate<'a>> = rows
            .iter()
            .map(|(n, score, avail)| Candidate {
                info: snap.get(n).unwrap(),
                score: *score,
                allocatable: *avail,
                available: *avail,
                tier: 0,
            })
            .collect();
        out.sort_by(candidate_order);
        out
    }

    fn picked_names(c: &[Candidate<'_>], picked: &[usize]) -> Vec<String> {
        picked.iter().map(|&i| c[i].info.name.to_string()).collect()
    }

    fn cluster_spread(min: i64, max: i64) -> Vec<SpreadConstraint> {
        vec![SpreadConstraint {
            spread_by_field: Some(SpreadByField::Cluster),
            min_groups: min,
            max_groups: max,
            ..Default::default()
        }]
    }

    fn rules(c: &[SpreadConstraint], need: Option<i64>, duplicated: bool) -> SelectionRules<'_> {
        SelectionRules {
            constraints: c,
            ignore_spread: false,
            need_replicas: need,
            replicas: need.unwrap_or(2),
            duplicated,
        }
    }

    type ClusterPathRow<'a> = (
        &'a str,
        i64,
        i64,
        Option<i64>,
        Result<&'a [&'a str], &'a str>,
    );

    #[test]
    fn cluster_path_table() {
        let snap = snapshot(&[("m1", ""), ("m2", ""), ("m3", ""), ("m4", "")]);
        // Karmada's example: m1 60/40, m2 50/30, m3 40/60; need 80 of two ⇒ m1 + m3.
        let cands = candidates(&snap, &[("m1", 60, 40), ("m2", 50, 30), ("m3", 40, 60)]);
        let rows: &[ClusterPathRow] = &[
            ("ignore replicas: first n", 2, 2, None, Ok(&["m1", "m2"])),
            ("capacity swap", 2, 2, Some(80), Ok(&["m1", "m3"])),
            ("enough already", 1, 2, Some(70), Ok(&["m1", "m2"])),
            ("max above total", 1, 5, None, Ok(&["m1", "m2", "m3"])),
            (
                "too few clusters",
                4,
                4,
                None,
                Err("the number of feasible clusters is less than spreadConstraint.MinGroups"),
            ),
            (
                "not enough capacity",
                1,
                1,
                Some(61),
                Err("no enough resource when selecting 1 clusters"),
            ),
            ("maxGroups 0 selects none", 0, 0, None, Ok(&[])),
        ];
        for (name, min, max, need, want) in rows {
            let c = cluster_spread(*min, *max);
            let got = select(&cands, &rules(&c, *need, need.is_none()), &mut Vec::new())
                .map(|p| picked_names(&cands, &p));
            let want = want
                .map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .map_err(str::to_string);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn region_path() {
        let snap = snapshot(&[
            ("a1", "a"),
            ("a2", "a"),
            ("b1", "b"),
            ("c1", "c"),
            ("c2", "c"),
            ("c3", "c"),
        ]);
        let cands = candidates(
            &snap,
            &[
                ("a1", 100, 5),
                ("a2", 0, 5),
                ("b1", 0, 5),
                ("c1", 0, 5),
                ("c2", 0, 5),
                ("c3", 0, 1),
            ],
        );
        let constraints = vec![
            SpreadConstraint {
                spread_by_field: Some(SpreadByField::Region),
                min_groups: 2,
                max_groups: 2,
                ..Default::default()
            },
            SpreadConstraint {
                spread_by_field: Some(SpreadByField::Cluster),
                min_groups: 3,
                max_groups: 4,
                ..Default::default()
            },
        ];
        let r = SelectionRules {
            constraints: &constraints,
            ignore_spread: false,
            need_replicas: Some(10),
            replicas: 10,
            duplicated: false,
        };
        // Group scores (Divided, target ceil(10/2)=5, take ≥3 clusters):
        // a: a1+a2 (2 clusters, 10 ≥ 5) → 5000 + 100/2 = 5050; b: 5 → 5000 + 0 = 5000;
        // c: three clusters → 5000 + 0 = 5000.
        let mut trace = Vec::new();
        let picked = select(&cands, &r, &mut trace).unwrap();
        // Feasible pairs holding ≥3 clusters: [b,a] and [a,c] (weight 10050), [b,c] (10000);
        // [a,c] holds more clusters.
        // Best of a (a1) and of c (c1), then the best others up to 4: a2, c2.
        assert_eq!(picked_names(&cands, &picked), vec!["a1", "c1", "a2", "c2"]);
        assert!(trace[0].contains("a (2, 5050)"), "{trace:?}");

        // Too few regions.
        let constraints = vec![SpreadConstraint {
            spread_by_field: Some(SpreadByField::Region),
            min_groups: 4,
            max_groups: 4,
            ..Default::default()
        }];
        let r = SelectionRules {
            constraints: &constraints,
            ..r
        };
        assert_eq!(
            select(&cands, &r, &mut Vec::new()),
            Err(
                "the number of feasible region is less than spreadConstraint.MinGroups".to_string()
            )
        );
        // Only label or zone constraints cannot be satisfied.
        let constraints = vec![SpreadConstraint {
            spread_by_field: Some(SpreadByField::Zone),
            ..Default::default()
        }];
        let r = SelectionRules {
            constraints: &constraints,
            ..r
        };
        assert_eq!(
            select(&cands, &r, &mut Vec::new()),
            Err("just support cluster and region spread constraint".to_string())
        );
    }

    #[test]
    fn group_scores() {
        let snap = snapshot(&[("m1", ""), ("m2", ""), ("m3", "")]);
        let c = candidates(&snap, &[("m1", 100, 60), ("m2", 100, 70), ("m3", 0, 10)]);
        let refs: Vec<&Candidate<'_>> = c.iter().collect();
        let dup = SelectionRules {
            constraints: &[],
            ignore_spread: false,
            need_replicas: None,
            replicas: 50,
            duplicated: true,
        };
        // Two clusters hold 50: 2·1000 + (100+100)/2.
        assert_eq!(group_score(&refs, &dup, 1, 1), 2100);
        let div = SelectionRules {
            duplicated: false,
            replicas: 100,
            ..dup
        };
        // target ceil(100/2) = 50; m2 (70) then m1 (60): two clusters needed, 130 ≥ 50.
        assert_eq!(group_score(&refs, &div, 2, 1), 50_100);
        // target 500 not reachable: Σ 140 · 1000 + 200 / 3.
        let big = SelectionRules {
            replicas: 1000,
            ..div
        };
        assert_eq!(group_score(&refs, &big, 2, 1), 140_066);
    }
}
