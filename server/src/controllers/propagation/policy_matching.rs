//! Which policy propagates a resource template (docs/semantics.md §6): a template matched
//! by any PropagationPolicy uses the best one, ClusterPropagationPolicies only when no
//! PropagationPolicy matches; best = highest explicit priority, then the most exact selector
//! (name over label selector over kind only), then the smallest name. A template already
//! claimed by a policy that still matches stays with it unless a better policy preempts it
//! (`preemption: Always`): a PropagationPolicy takes templates of lower-priority
//! PropagationPolicies and of any ClusterPropagationPolicy; a ClusterPropagationPolicy takes
//! only those of lower-priority ClusterPropagationPolicies.

use flotilla_api::policy::{Preemption, PropagationSpec, SelectorMatch};
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// Namespaced or cluster-wide policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyScope {
    /// PropagationPolicy (wins over every ClusterPropagationPolicy).
    Namespaced,
    /// ClusterPropagationPolicy.
    Cluster,
}

/// A policy as the matcher sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// PP or CPP.
    pub scope: PolicyScope,
    /// Namespace (empty for CPPs).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its permanent id label.
    pub permanent_id: String,
    /// Explicit priority.
    pub priority: i32,
    /// `preemption: Always`.
    pub preempts: bool,
    /// Its spec.
    pub spec: PropagationSpec,
}

impl Candidate {
    /// A candidate from a policy's parts.
    pub fn new(
        scope: PolicyScope,
        namespace: &str,
        name: &str,
        permanent_id: &str,
        spec: PropagationSpec,
    ) -> Self {
        Candidate {
            scope,
            namespace: namespace.to_string(),
            name: name.to_string(),
            permanent_id: permanent_id.to_string(),
            priority: spec.priority.unwrap_or(0),
            preempts: spec.preemption == Some(Preemption::Always),
            spec,
        }
    }
}

/// The identity of a template, for matching.
#[derive(Clone, Debug)]
pub struct TemplateRef<'a> {
    /// apiVersion.
    pub api_version: &'a str,
    /// kind.
    pub kind: &'a str,
    /// namespace (empty for cluster-scoped).
    pub namespace: &'a str,
    /// name.
    pub name: &'a str,
    /// labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// How well a policy selects a template (its best selector), if at all. A PropagationPolicy
/// only selects templates of its own namespace.
pub fn selection(candidate: &Candidate, t: &TemplateRef) -> Option<SelectorMatch> {
    if candidate.scope == PolicyScope::Namespaced && candidate.namespace != t.namespace {
        return None;
    }
    candidate
        .spec
        .resource_selectors
        .iter()
        .filter_map(|s| s.match_template(t.api_version, t.kind, t.namespace, t.name, t.labels))
        .max()
}

/// The policy for a template among `candidates`, given the permanent id of the policy that
/// claims it now (if any). Returns an index into `candidates`.
pub fn choose_policy<C: std::borrow::Borrow<Candidate>>(
    candidates: &[C],
    t: &TemplateRef,
    claimed_by: Option<&str>,
) -> Option<usize> {
    let mut matching: Vec<(usize, SelectorMatch)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| selection(c.borrow(), t).map(|m| (i, m)))
        .collect();
    matching.sort_by_key(|(i, m)| {
        let c = candidates[*i].borrow();
        (c.scope, Reverse(c.priority), Reverse(*m), c.name.clone())
    });
    let (best, _) = *matching.first()?;
    let Some(current) = claimed_by.and_then(|id| {
        matching
            .iter()
            .find(|(i, _)| candidates[*i].borrow().permanent_id == id)
            .map(|(i, _)| *i)
    }) else {
        return Some(best);
    };
    if current == best {
        return Some(current);
    }
    let (b, c) = (candidates[best].borrow(), candidates[current].borrow());
    let preempt = b.preempts
        && match (b.scope, c.scope) {
            (PolicyScope::Namespaced, PolicyScope::Namespaced) => b.priority > c.priority,
            (PolicyScope::Namespaced, PolicyScope::Cluster) => true,
            (PolicyScope::Cluster, PolicyScope::Cluster) => b.priority > c.priority,
            (PolicyScope::Cluster, PolicyScope::Namespaced) => false,
        };
    Some(if preempt { best } else { current })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::policy::ResourceSelector;
    use flotilla_api::selector::LabelSelector;

    fn selector(name: &str, label: Option<(&str, &str)>) -> ResourceSelector {
        ResourceSelector {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: name.into(),
            label_selector: label.map(|(k, v)| LabelSelector::from_labels([(k, v)])),
            ..Default::default()
        }
    }

    fn pp(name: &str, priority: i32, preempt: bool, sel: ResourceSelector) -> Candidate {
        let spec = PropagationSpec {
            resource_selectors: vec![sel],
            priority: Some(priority),
            preemption: Some(if preempt {
                Preemption::Always
            } else {
                Preemption::Never
            }),
            ..Default::default()
        };
        Candidate::new(
            PolicyScope::Namespaced,
            "default",
            name,
            &format!("id-{name}"),
            spec,
        )
    }

    fn cpp(name: &str, priority: i32, preempt: bool, sel: ResourceSelector) -> Candidate {
        let mut c = pp(name, priority, preempt, sel);
        c.scope = PolicyScope::Cluster;
        c.namespace.clear();
        c
    }

    #[test]
    fn policy_choice_and_preemption() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let t = TemplateRef {
            api_version: "apps/v1",
            kind: "Deployment",
            namespace: "default",
            name: "web",
            labels: &labels,
        };
        let all = || selector("", None);
        let by_name = || selector("web", None);
        let by_label = || selector("", Some(("app", "web")));
        // (candidates, claimed by, want name or None)
        let table: Vec<(Vec<Candidate>, Option<&str>, Option<&str>)> = vec![
            (vec![], None, None),
            (vec![pp("a", 0, false, selector("other", None))], None, None),
            (
                vec![pp("b", 0, false, all()), pp("a", 0, false, all())],
                None,
                Some("a"),
            ),
            (
                vec![pp("a", 0, false, all()), pp("b", 0, false, by_label())],
                None,
                Some("b"),
            ),
            (
                vec![pp("a", 0, false, by_label()), pp("b", 0, false, by_name())],
                None,
                Some("b"),
            ),
            (
                vec![pp("a", 0, false, by_name()), pp("b", 1, false, all())],
                None,
                Some("b"),
            ),
            (
                vec![cpp("c", 9, false, by_name()), pp("p", 0, false, all())],
                None,
                Some("p"),
            ),
            (vec![cpp("c", 0, false, all())], None, Some("c")),
            // Claimed: stays without preemption...
            (
                vec![pp("old", 0, false, all()), pp("new", 5, false, by_name())],
                Some("id-old"),
                Some("old"),
            ),
            // ...is taken by a higher-priority preempting PP...
            (
                vec![pp("old", 0, false, all()), pp("new", 5, true, by_name())],
                Some("id-old"),
                Some("new"),
            ),
            // ...but not by an equal-priority one (only strictly lower is preempted).
            (
                vec![pp("old", 5, false, all()), pp("new", 5, true, by_name())],
                Some("id-old"),
                Some("old"),
            ),
            // A preempting PP takes it from any CPP.
            (
                vec![cpp("c", 100, false, by_name()), pp("p", 0, true, all())],
                Some("id-c"),
                Some("p"),
            ),
            (
                vec![cpp("c", 100, false, by_name()), pp("p", 0, false, all())],
                Some("id-c"),
                Some("c"),
            ),
            // A CPP preempts only lower CPPs, never a PP.
            (
                vec![cpp("low", 0, false, all()), cpp("high", 3, true, all())],
                Some("id-low"),
                Some("high"),
            ),
            (
                vec![pp("p", 0, false, all()), cpp("c", 9, true, all())],
                Some("id-p"),
                Some("p"),
            ),
            // A claim by a policy that no longer matches is ignored.
            (
                vec![
                    pp("gone", 0, false, selector("x", None)),
                    pp("b", 0, false, all()),
                ],
                Some("id-gone"),
                Some("b"),
            ),
        ];
        for (i, (cands, claimed, want)) in table.into_iter().enumerate() {
            let got = choose_policy(&cands, &t, claimed).map(|i| cands[i].name.as_str());
            assert_eq!(got, want, "row {i}");
        }
    }

    #[test]
    fn namespaced_policies_select_only_their_namespace() {
        let labels = BTreeMap::new();
        let t = TemplateRef {
            api_version: "apps/v1",
            kind: "Deployment",
            namespace: "other",
            name: "web",
            labels: &labels,
        };
        assert_eq!(selection(&pp("a", 0, false, selector("", None)), &t), None);
        assert_eq!(
            selection(&cpp("c", 0, false, selector("", None)), &t),
            Some(SelectorMatch::All)
        );
    }
}
