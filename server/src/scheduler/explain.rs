//! Why the scheduler placed a binding where it did (Flotilla's "explain", docs/semantics.md
//! Part 1): for every cluster whether it was selected, the filter that rejected it and why,
//! its score and available replicas and the replicas it got; plus the lines describing the
//! strategy, the selection and the replica arithmetic. Also the FitError message built from
//! the rejections, as Karmada words it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::filters::Rejection;

/// What happened to one cluster (its name is kept by the [`Explanation`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterExplanation {
    /// The filter that rejected the cluster, with its reason; `None` when it was feasible.
    pub rejected: Option<Rejection>,
    /// Sum of the score plugins (feasible clusters).
    pub score: Option<i64>,
    /// Replicas it can take: estimator result plus what it already runs (feasible clusters).
    pub available_replicas: Option<i64>,
    /// Overflow tier (0 primary) when overflow affinities are in use.
    pub tier: Option<u32>,
    /// Chosen by selection.
    pub selected: bool,
    /// Replicas in the new result, when it is part of it.
    pub replicas: Option<i32>,
}

impl ClusterExplanation {
    pub(crate) fn rejected(why: Rejection) -> Self {
        ClusterExplanation {
            rejected: Some(why),
            score: None,
            available_replicas: None,
            tier: None,
            selected: false,
            replicas: None,
        }
    }

    pub(crate) fn feasible(score: i64, available: i64, tier: Option<u32>) -> Self {
        ClusterExplanation {
            rejected: None,
            score: Some(score),
            available_replicas: Some(available),
            tier,
            selected: false,
            replicas: None,
        }
    }
}

impl fmt::Display for ClusterExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rejected {
            Some(r) => write!(f, "rejected by {}: {}", r.filter(), r),
            None => {
                match (self.selected, self.replicas) {
                    (true, Some(r)) => write!(f, "selected, {r} replica(s)")?,
                    (true, None) => f.write_str("selected, no replicas")?,
                    (false, _) => f.write_str("feasible, not selected")?,
                }
                write!(
                    f,
                    " (score {}, available {}",
                    self.score.unwrap_or(0),
                    self.available_replicas.unwrap_or(0)
                )?;
                if let Some(t) = self.tier {
                    write!(f, ", tier {t}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// The whole explanation of one scheduling attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explanation {
    /// Cluster names, shared with the snapshot (sorted).
    names: Arc<[Arc<str>]>,
    /// One entry per name, same order.
    verdicts: Vec<ClusterExplanation>,
    /// Strategy, selection and replica arithmetic, in order.
    pub lines: Vec<String>,
}

impl Explanation {
    pub(crate) fn new(names: Arc<[Arc<str>]>, lines: Vec<String>) -> Self {
        let verdicts = Vec::with_capacity(names.len());
        Explanation {
            names,
            verdicts,
            lines,
        }
    }

    /// Appends the verdict of the next cluster of the snapshot.
    pub(crate) fn push(&mut self, verdict: ClusterExplanation) {
        self.verdicts.push(verdict);
    }

    /// Every cluster with its explanation, by name.
    pub fn clusters(&self) -> impl Iterator<Item = (&str, &ClusterExplanation)> {
        self.names.iter().map(|n| &**n).zip(&self.verdicts)
    }

    /// Number of clusters explained.
    pub fn len(&self) -> usize {
        self.verdicts.len()
    }

    /// True when no cluster is explained.
    pub fn is_empty(&self) -> bool {
        self.verdicts.is_empty()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.names
            .binary_search_by(|n| (**n).cmp(name))
            .ok()
            .filter(|&i| i < self.verdicts.len())
    }

    /// The explanation of one cluster.
    pub fn cluster(&self, name: &str) -> Option<&ClusterExplanation> {
        self.index_of(name).and_then(|i| self.verdicts.get(i))
    }

    pub(crate) fn cluster_mut(&mut self, name: &str) -> Option<&mut ClusterExplanation> {
        self.index_of(name).and_then(|i| self.verdicts.get_mut(i))
    }

    pub(crate) fn at_mut(&mut self, index: usize) -> Option<&mut ClusterExplanation> {
        self.verdicts.get_mut(index)
    }

    /// Karmada's FitError text: `0/N clusters are available: <count> <reason>, ….` with the
    /// reasons sorted; deleting clusters count in N but give no reason.
    pub fn fit_error_message(&self) -> String {
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for c in &self.verdicts {
            if let Some(r) = c.rejected.as_ref().filter(|r| r.is_filter()) {
                *reasons.entry(r.to_string()).or_insert(0) += 1;
            }
        }
        let mut parts: Vec<String> = reasons
            .into_iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        parts.sort();
        let mut msg = format!("0/{} clusters are available:", self.verdicts.len());
        if !parts.is_empty() {
            msg.push(' ');
            msg.push_str(&parts.join(", "));
            msg.push('.');
        }
        msg
    }
}

impl fmt::Display for Explanation {
    /// One line per cluster, then the arithmetic lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, c) in self.clusters() {
            writeln!(f, "{name}: {c}")?;
        }
        for l in &self.lines {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}
