//! How many replicas each selected cluster gets (docs/semantics.md §8.4, §8.5; Part 1:
//! Webster division with Karmada's deterministic tie-break).
//!
//! - [`webster`]: Sainte-Laguë apportionment. Each seat goes to the party with the largest
//!   `votes / (2·seats + 1)`, compared exactly in integers; ties go to the party with fewer
//!   seats, then by name in the direction [`TieBreak::from_uid`] picks from the binding's uid.
//! - [`static_weights`] + [`webster`]: static weights, recomputed from scratch every time.
//! - [`divide_dynamic`]: dynamic weight and Aggregated: fresh, scale-down, scale-up (first
//!   schedule and failover included) and steady modes; replicas on surviving clusters are kept
//!   and only the missing ones are spread by capacity.
//! - [`duplicate`]: every selected cluster runs all replicas.
//!
//! Every function appends human-readable lines describing its arithmetic to a trace, which
//! becomes part of the scheduling explanation.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

/// Seat-by-seat lines are written for at most this many seats.
pub const MAX_TRACED_SEATS: usize = 64;

/// FNV-1a, 32 bits (Go's `hash/fnv` `New32a`).
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Which name wins a Webster tie between parties with equal priority and equal seats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TieBreak {
    /// The lexicographically smaller name gets the seat.
    SmallerName,
    /// The lexicographically larger name gets the seat.
    LargerName,
}

impl TieBreak {
    /// Karmada's tie-breaker by binding uid: FNV-1a-32 of the uid odd ⇒ the larger name wins;
    /// even, or no uid ⇒ the smaller name wins.
    pub fn from_uid(uid: &str) -> Self {
        if !uid.is_empty() && fnv1a32(uid.as_bytes()) % 2 == 1 {
            TieBreak::LargerName
        } else {
            TieBreak::SmallerName
        }
    }

    fn describe(self) -> &'static str {
        match self {
            TieBreak::SmallerName => "fewer seats, then the smaller name",
            TieBreak::LargerName => "fewer seats, then the larger name",
        }
    }
}

/// One party of a Webster apportionment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Party<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// Votes (weight); 0 for a party that only carries initial seats.
    pub votes: i64,
    /// Seats held before the apportionment (its initial assignment).
    pub initial: i64,
}

/// Result of [`webster`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Apportionment<'a> {
    /// `(name, seats)` per party, sorted by name, initial seats included.
    pub seats: Vec<(&'a str, i64)>,
    /// The party (index into the input) that won each of the first [`MAX_TRACED_SEATS`] seats.
    pub order: Vec<usize>,
}

struct Contender<'a> {
    idx: usize,
    name: &'a str,
    votes: i64,
    seats: i64,
    tie: TieBreak,
}

impl Contender<'_> {
    /// `self` before `other` in the Webster queue.
    fn precedence(&self, other: &Self) -> Ordering {
        // votes_a / (2 s_a + 1) vs votes_b / (2 s_b + 1), cross-multiplied.
        let a = i128::from(self.votes) * i128::from(2 * other.seats + 1);
        let b = i128::from(other.votes) * i128::from(2 * self.seats + 1);
        a.cmp(&b)
            .then_with(|| other.seats.cmp(&self.seats))
            .then_with(|| match self.tie {
                TieBreak::SmallerName => other.name.cmp(self.name),
                TieBreak::LargerName => self.name.cmp(other.name),
            })
    }
}

impl PartialEq for Contender<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.precedence(other) == Ordering::Equal
    }
}
impl Eq for Contender<'_> {}
impl PartialOrd for Contender<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Contender<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.precedence(other)
    }
}

/// Webster (Sainte-Laguë) apportionment of `new_seats` among `parties`. Parties with equal
/// names should not occur; negative votes count as zero.
pub fn webster<'a>(new_seats: i64, parties: &[Party<'a>], tie: TieBreak) -> Apportionment<'a> {
    let mut heap: BinaryHeap<Contender<'a>> = parties
        .iter()
        .enumerate()
        .map(|(idx, p)| Contender {
            idx,
            name: p.name,
            votes: p.votes.max(0),
            seats: p.initial.max(0),
            tie,
        })
        .collect();
    let mut order = Vec::new();
    if !heap.is_empty() {
        for _ in 0..new_seats.max(0) {
            let Some(mut top) = heap.pop() else { break };
            if order.len() < MAX_TRACED_SEATS {
                order.push(top.idx);
            }
            top.seats += 1;
            heap.push(top);
        }
    }
    let mut seats: Vec<(&'a str, i64)> = heap.into_iter().map(|c| (c.name, c.seats)).collect();
    seats.sort_by(|a, b| a.0.cmp(b.0));
    Apportionment { seats, order }
}

/// Appends the seat order of `result` to `trace`: which party won each seat and the priority
/// `votes/(2·seats+1)` it won with.
pub fn trace_seats(
    trace: &mut Vec<String>,
    total: i64,
    parties: &[Party<'_>],
    result: &Apportionment<'_>,
    tie: TieBreak,
) {
    let votes: Vec<String> = parties
        .iter()
        .map(|p| {
            if p.initial > 0 {
                format!("{}:{} (holding {})", p.name, p.votes, p.initial)
            } else {
                format!("{}:{}", p.name, p.votes)
            }
        })
        .collect();
    trace.push(format!(
        "Webster: {total} seat(s) over weights {}; ties: {}",
        votes.join(", "),
        tie.describe()
    ));
    let mut held: Vec<i64> = parties.iter().map(|p| p.initial.max(0)).collect();
    let mut line = String::new();
    for (n, &idx) in result.order.iter().enumerate() {
        let (Some(p), Some(h)) = (parties.get(idx), held.get_mut(idx)) else {
            continue;
        };
        if !line.is_empty() {
            line.push_str(", ");
        }
        let _ = write!(
            line,
            "#{} {} ({}/{})",
            n + 1,
            p.name,
            p.votes.max(0),
            2 * *h + 1
        );
        *h += 1;
    }
    if !line.is_empty() {
        if usize::try_from(total).is_ok_and(|t| t > result.order.len()) {
            let _ = write!(line, ", … {} more", total - result.order.len() as i64);
        }
        trace.push(format!("seat order: {line}"));
    }
}

/// Replicas per cluster name.
pub type Assignment<'a> = Vec<(&'a str, i64)>;

/// Sum of replicas, widened.
pub fn sum(list: &[(&str, i64)]) -> i64 {
    list.iter().map(|(_, r)| *r).sum()
}

fn render(list: &[(&str, i64)]) -> String {
    if list.is_empty() {
        return "(none)".to_string();
    }
    list.iter()
        .map(|(n, r)| format!("{n}={r}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Duplicated: every selected cluster gets all `replicas`.
pub fn duplicate<'a>(
    selected: &[&'a str],
    replicas: i64,
    trace: &mut Vec<String>,
) -> Vec<(&'a str, i64)> {
    trace.push(format!(
        "Duplicated: each of the {} selected cluster(s) runs all {replicas} replica(s)",
        selected.len()
    ));
    selected.iter().map(|n| (*n, replicas)).collect()
}

/// Static weights of the selected clusters: each gets the largest weight among the rules
/// whose target matches it (`weight_of` returns the matching rules' weights, or `None` when
/// there is no `weightPreference`); clusters with weight 0 are left out, and when every weight
/// is 0 each selected cluster gets 1.
pub fn static_weights<'a>(
    selected: &[&'a str],
    weight_of: impl Fn(usize) -> Option<i64>,
    trace: &mut Vec<String>,
) -> Vec<(&'a str, i64)> {
    let mut any_rules = false;
    let mut weights: Vec<(&'a str, i64)> = Vec::with_capacity(selected.len());
    for (i, name) in selected.iter().enumerate() {
        match weight_of(i) {
            None => weights.push((name, 1)),
            Some(w) => {
                any_rules = true;
                if w > 0 {
                    weights.push((name, w));
                }
            }
        }
    }
    if weights.is_empty() {
        trace.push(
            "static weights: no rule matches a selected cluster, every selected cluster gets weight 1"
                .to_string(),
        );
        return selected.iter().map(|n| (*n, 1)).collect();
    }
    if any_rules {
        let left_out = selected.len() - weights.len();
        let mut line = format!(
            "static weights (largest matching rule): {}",
            render(&weights)
        );
        if left_out > 0 {
            let _ = write!(
                line,
                "; {left_out} selected cluster(s) match no rule and are left out"
            );
        }
        trace.push(line);
    } else {
        trace.push("no weightPreference: every selected cluster gets weight 1".to_string());
    }
    weights
}

/// Static-weight division: Webster over `replicas` seats by weight, with no initial
/// assignment (the previous result is not consulted).
pub fn divide_static<'a>(
    weights: &[(&'a str, i64)],
    replicas: i64,
    tie: TieBreak,
    trace: &mut Vec<String>,
) -> Vec<(&'a str, i64)> {
    let parties: Vec<Party<'a>> = weights
        .iter()
        .map(|(name, w)| Party {
            name,
            votes: *w,
            initial: 0,
        })
        .collect();
    let result = webster(replicas, &parties, tie);
    trace_seats(trace, replicas, &parties, &result, tie);
    result.seats
}

/// How a dynamic division treats the previous result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DynamicMode {
    /// `rescheduleTriggeredAt` is newer than the last schedule: divide from scratch.
    Fresh,
    /// More replicas assigned than wanted: shrink in proportion to the current assignment.
    ScaleDown,
    /// Fewer assigned than wanted (first schedule, scale-up, failover): keep what exists and
    /// spread the missing replicas by capacity.
    ScaleUp,
    /// Exactly the wanted number on surviving clusters: keep it.
    Steady,
}

/// Input of [`divide_dynamic`].
#[derive(Clone, Debug)]
pub struct DynamicInput<'a> {
    /// Selected clusters in selection order with what the estimator says each can still take.
    pub candidates: Vec<(&'a str, i64)>,
    /// The previous result (`spec.clusters`) in its order.
    pub previous: Vec<(&'a str, i64)>,
    /// `spec.replicas`.
    pub replicas: i64,
    /// Aggregated (as few clusters as capacity allows) rather than dynamic weight.
    pub aggregated: bool,
    /// A manual reschedule asks for a fresh division.
    pub fresh: bool,
    /// Webster tie direction.
    pub tie: TieBreak,
}

/// Not enough capacity: Σ available replicas is below what must be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotEnoughCapacity {
    /// Σ available replicas.
    pub available: i64,
}

fn stable_desc(mut list: Assignment<'_>) -> Assignment<'_> {
    list.sort_by_key(|e| std::cmp::Reverse(e.1));
    list
}

/// Dynamic weight (`dynamicWeight: AvailableReplicas`) and Aggregated division.
pub fn divide_dynamic<'a>(
    input: &DynamicInput<'a>,
    trace: &mut Vec<String>,
) -> Result<Vec<(&'a str, i64)>, NotEnoughCapacity> {
    let is_candidate = |name: &str| input.candidates.iter().any(|(c, _)| *c == name);
    // Previous entries on clusters that are still selected; replicas on dropped or evicted
    // clusters count as missing.
    let scheduled: Vec<(&'a str, i64)> = input
        .previous
        .iter()
        .filter(|(n, _)| is_candidate(n))
        .copied()
        .collect();
    let assigned = sum(&scheduled);
    let mode = if input.fresh {
        DynamicMode::Fresh
    } else {
        match assigned.cmp(&input.replicas) {
            Ordering::Greater => DynamicMode::ScaleDown,
            Ordering::Less => DynamicMode::ScaleUp,
            Ordering::Equal => DynamicMode::Steady,
        }
    };
    let kind = if input.aggregated {
        "Aggregated"
    } else {
        "DynamicWeight"
    };
    let (target, available, init, weighs): (i64, Assignment<'a>, Assignment<'a>, &str) = match mode
    {
        DynamicMode::Steady => {
            trace.push(format!(
                "{kind}, steady: the {assigned} replica(s) on surviving clusters already match spec.replicas; kept as is: {}",
                render(&scheduled)
            ));
            return Ok(scheduled);
        }
        DynamicMode::Fresh => {
            let avail: Vec<(&'a str, i64)> = input
                .candidates
                .iter()
                .map(|(n, a)| {
                    let prev: i64 = scheduled
                        .iter()
                        .filter(|(p, _)| p == n)
                        .map(|(_, r)| *r)
                        .sum();
                    (*n, a.saturating_add(prev))
                })
                .collect();
            trace.push(format!(
                "{kind}, fresh (rescheduleTriggeredAt is newer than lastScheduledTime): all {} replica(s) divided from scratch over capacity plus current replicas",
                input.replicas
            ));
            (
                input.replicas,
                stable_desc(avail),
                Vec::new(),
                "room including current replicas",
            )
        }
        DynamicMode::ScaleDown => {
            trace.push(format!(
                "{kind}, scale down: {assigned} assigned on surviving clusters > {} wanted; divided in proportion to the current assignment",
                input.replicas
            ));
            (
                input.replicas,
                stable_desc(scheduled.clone()),
                Vec::new(),
                "current replicas",
            )
        }
        DynamicMode::ScaleUp => {
            let target = input.replicas - assigned;
            trace.push(format!(
                "{kind}, scale up: {assigned} of {} replica(s) kept on surviving clusters ({}); {target} to place by available replicas",
                input.replicas,
                render(&scheduled)
            ));
            (
                target,
                stable_desc(input.candidates.clone()),
                scheduled.clone(),
                "room for new replicas",
            )
        }
    };
    let total_available = sum(&available);
    trace.push(format!(
        "weights, {weighs} (sorted): {} = {total_available}",
        render(&available)
    ));
    if total_available < target {
        trace.push(format!(
            "Clusters available replicas {total_available} are not enough to schedule {target}"
        ));
        return Err(NotEnoughCapacity {
            available: total_available,
        });
    }
    let mut weights = available;
    if input.aggregated {
        // Clusters already running replicas go first (keeping their order), then the
        // shortest prefix whose capacity covers the target.
        let (mut front, back): (Vec<_>, Vec<_>) = weights
            .into_iter()
            .partition(|(n, _)| init.iter().any(|(p, r)| p == n && *r > 0));
        front.extend(back);
        let mut acc = 0i64;
        let mut keep = front.len();
        for (i, (_, a)) in front.iter().enumerate() {
            acc = acc.saturating_add(*a);
            if acc >= target {
                keep = i + 1;
                break;
            }
        }
        front.truncate(keep);
        trace.push(format!(
            "aggregated: fewest clusters covering {target}: {}",
            render(&front)
        ));
        weights = front;
    }
    let parties: Vec<Party<'a>> = weights
        .iter()
        .map(|(name, a)| Party {
            name,
            votes: *a,
            initial: 0,
        })
        .collect();
    let result = webster(target, &parties, input.tie);
    trace_seats(trace, target, &parties, &result, input.tie);
    let mut merged = init;
    for (name, r) in result.seats {
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 += r,
            None => merged.push((name, r)),
        }
    }
    if mode == DynamicMode::ScaleUp {
        merged.sort_by(|a, b| a.0.cmp(b.0));
        trace.push(format!("merged with kept replicas: {}", render(&merged)));
    }
    Ok(merged)
}

/// Drops clusters that got no replica (`removeZeroReplicasCluster`).
pub fn remove_zero(list: Assignment<'_>) -> Assignment<'_> {
    list.into_iter().filter(|(_, r)| *r > 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parties<'a>(list: &[(&'a str, i64)]) -> Vec<Party<'a>> {
        list.iter()
            .map(|(n, v)| Party {
                name: n,
                votes: *v,
                initial: 0,
            })
            .collect()
    }

    /// A uid whose FNV-1a-32 hash has the wanted parity.
    fn uid_with_parity(odd: bool) -> String {
        (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| (fnv1a32(u.as_bytes()) % 2 == 1) == odd)
            .unwrap()
    }

    type WebsterRow<'a> = (&'a str, i64, &'a [(&'a str, i64)], &'a [(&'a str, i64)]);

    #[test]
    fn webster_table() {
        let rows: &[WebsterRow] = &[
            (
                "14 at 3:2:1",
                14,
                &[("a", 3), ("b", 2), ("c", 1)],
                &[("a", 7), ("b", 5), ("c", 2)],
            ),
            (
                "3 at 1:2",
                3,
                &[("member1", 1), ("member2", 2)],
                &[("member1", 1), ("member2", 2)],
            ),
            (
                "wikipedia 8 seats",
                8,
                &[("A", 100_000), ("B", 80_000), ("C", 30_000), ("D", 20_000)],
                &[("A", 3), ("B", 3), ("C", 1), ("D", 1)],
            ),
            ("no seats", 0, &[("a", 1), ("b", 1)], &[("a", 0), ("b", 0)]),
            (
                "karmada example 4 seats",
                4,
                &[("Alpha", 1200), ("Beta", 900), ("Gamma", 400)],
                &[("Alpha", 2), ("Beta", 1), ("Gamma", 1)],
            ),
            ("one party", 5, &[("x", 7)], &[("x", 5)]),
            (
                "zero votes",
                2,
                &[("a", 0), ("b", 0)],
                &[("a", 1), ("b", 1)],
            ),
        ];
        for (name, seats, votes, want) in rows {
            let got = webster(*seats, &parties(votes), TieBreak::SmallerName);
            assert_eq!(got.seats, want.to_vec(), "{name}");
        }
    }

    #[test]
    fn webster_seat_order_and_initial_seats() {
        let p = parties(&[("a", 3), ("b", 2), ("c", 1)]);
        let got = webster(4, &p, TieBreak::SmallerName);
        // a (3/1), b (2/1), c wins the 1 = 1 tie with fewer seats, then a (3/3).
        assert_eq!(got.order, vec![0, 1, 2, 0]);
        let mut trace = Vec::new();
        trace_seats(&mut trace, 4, &p, &got, TieBreak::SmallerName);
        assert_eq!(
            trace[1],
            "seat order: #1 a (3/1), #2 b (2/1), #3 c (1/1), #4 a (3/3)"
        );
        // Initial seats lower a party's priority; a party with only seats never gains.
        let p = vec![
            Party {
                name: "a",
                votes: 4,
                initial: 2,
            },
            Party {
                name: "b",
                votes: 1,
                initial: 0,
            },
            Party {
                name: "old",
                votes: 0,
                initial: 3,
            },
        ];
        let got = webster(1, &p, TieBreak::SmallerName);
        assert_eq!(got.seats, vec![("a", 2), ("b", 1), ("old", 3)]);
    }

    #[test]
    fn tie_breaker_follows_uid_parity() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(TieBreak::from_uid(""), TieBreak::SmallerName);
        let even = uid_with_parity(false);
        let odd = uid_with_parity(true);
        assert_eq!(TieBreak::from_uid(&even), TieBreak::SmallerName);
        assert_eq!(TieBreak::from_uid(&odd), TieBreak::LargerName);
        let p = parties(&[("member1", 1), ("member2", 1), ("member3", 1)]);
        let seats = |uid: &str| webster(1, &p, TieBreak::from_uid(uid)).seats;
        assert_eq!(
            seats(&even),
            vec![("member1", 1), ("member2", 0), ("member3", 0)]
        );
        assert_eq!(
            seats(&odd),
            vec![("member1", 0), ("member2", 0), ("member3", 1)]
        );
        // Fewer seats beats the name rule.
        let p = vec![
            Party {
                name: "a",
                votes: 3,
                initial: 1,
            },
            Party {
                name: "b",
                votes: 1,
                initial: 0,
            },
        ];
        assert_eq!(
            webster(1, &p, TieBreak::SmallerName).seats,
            vec![("a", 1), ("b", 1)]
        );
    }

    type StaticRow<'a> = (&'a str, &'a [Option<i64>], &'a [(&'a str, i64)]);

    #[test]
    fn static_weight_rules() {
        let selected = ["m1", "m2", "m3"];
        let rows: &[StaticRow] = &[
            (
                "no preference",
                &[None, None, None],
                &[("m1", 1), ("m2", 1), ("m3", 1)],
            ),
            (
                "zero left out",
                &[Some(2), Some(0), Some(1)],
                &[("m1", 2), ("m3", 1)],
            ),
            (
                "all zero",
                &[Some(0), Some(0), Some(0)],
                &[("m1", 1), ("m2", 1), ("m3", 1)],
            ),
        ];
        for (name, w, want) in rows {
            let got = static_weights(&selected, |i| w[i], &mut Vec::new());
            assert_eq!(got, want.to_vec(), "{name}");
        }
    }

    #[test]
    fn static_division_recomputes_from_scratch() {
        let mut trace = Vec::new();
        let got = divide_static(
            &[("member1", 1), ("member2", 2)],
            3,
            TieBreak::SmallerName,
            &mut trace,
        );
        assert_eq!(got, vec![("member1", 1), ("member2", 2)]);
        // member1 evicted: only member2 is weighted; it gets all 3.
        let got = divide_static(&[("member2", 2)], 3, TieBreak::SmallerName, &mut trace);
        assert_eq!(got, vec![("member2", 3)]);
        assert!(trace.iter().any(|l| l.starts_with("Webster: 3 seat(s)")));
    }

    fn dynamic<'a>(
        candidates: &[(&'a str, i64)],
        previous: &[(&'a str, i64)],
        replicas: i64,
        aggregated: bool,
    ) -> Result<Vec<(&'a str, i64)>, NotEnoughCapacity> {
        let mut out = divide_dynamic(
            &DynamicInput {
                candidates: candidates.to_vec(),
                previous: previous.to_vec(),
                replicas,
                aggregated,
                fresh: false,
                tie: TieBreak::SmallerName,
            },
            &mut Vec::new(),
        )?;
        out.sort_by(|a, b| a.0.cmp(b.0));
        Ok(remove_zero(out))
    }

    type DynamicRow<'a> = (
        &'a str,
        &'a [(&'a str, i64)],
        &'a [(&'a str, i64)],
        i64,
        bool,
        Result<&'a [(&'a str, i64)], i64>,
    );

    #[test]
    fn dynamic_table() {
        let rows: &[DynamicRow] = &[
            (
                "first schedule 12 at 6:12:18",
                &[("a", 6), ("b", 12), ("c", 18)],
                &[],
                12,
                false,
                Ok(&[("a", 2), ("b", 4), ("c", 6)]),
            ),
            (
                "scale up keeps existing",
                &[("a", 10), ("b", 10)],
                &[("a", 5), ("b", 1)],
                10,
                false,
                Ok(&[("a", 7), ("b", 3)]),
            ),
            (
                "failover: evicted cluster's replicas re-spread, survivor kept",
                &[("b", 2), ("c", 8)],
                &[("a", 4), ("b", 3)],
                7,
                false,
                Ok(&[("b", 4), ("c", 3)]),
            ),
            (
                "scale down in proportion",
                &[("a", 100), ("b", 100)],
                &[("a", 6), ("b", 3)],
                3,
                false,
                Ok(&[("a", 2), ("b", 1)]),
            ),
            (
                "steady keeps",
                &[("a", 0), ("b", 0)],
                &[("a", 2), ("b", 1)],
                3,
                false,
                Ok(&[("a", 2), ("b", 1)]),
            ),
            (
                "not enough capacity",
                &[("a", 1), ("b", 1)],
                &[],
                3,
                false,
                Err(2),
            ),
            (
                "aggregated: fewest clusters",
                &[("a", 5), ("b", 20), ("c", 8)],
                &[],
                10,
                true,
                Ok(&[("b", 10)]),
            ),
            (
                "aggregated: two needed",
                &[("a", 5), ("b", 6), ("c", 8)],
                &[],
                10,
                true,
                Ok(&[("b", 4), ("c", 6)]),
            ),
            (
                "aggregated scale up prefers clusters already running",
                &[("a", 3), ("b", 20)],
                &[("a", 2)],
                4,
                true,
                Ok(&[("a", 4)]),
            ),
            (
                "aggregated scale down drops the smallest",
                &[("a", 9), ("b", 9)],
                &[("a", 5), ("b", 1)],
                4,
                true,
                Ok(&[("a", 4)]),
            ),
        ];
        for (name, candidates, previous, replicas, aggregated, want) in rows {
            let got = dynamic(candidates, previous, *replicas, *aggregated);
            let want = want
                .map(|w| w.to_vec())
                .map_err(|a| NotEnoughCapacity { available: a });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn fresh_mode_divides_everything_again() {
        let mut trace = Vec::new();
        let mut got = divide_dynamic(
            &DynamicInput {
                candidates: vec![("a", 0), ("b", 4)],
                previous: vec![("a", 4)],
                replicas: 4,
                aggregated: false,
                fresh: true,
                tie: TieBreak::SmallerName,
            },
            &mut trace,
        )
        .unwrap();
        got.sort();
        // Capacities 4 (0 free + 4 running) and 4: split evenly.
        assert_eq!(got, vec![("a", 2), ("b", 2)]);
        assert!(trace[0].contains("fresh"));
    }
}
