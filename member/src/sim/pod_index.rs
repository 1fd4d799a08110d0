//! What the sim's control loop asks about pods, kept up to date instead of found by a scan:
//! the pods of each owner, the pods waiting for a node (in creation order), the pods that will
//! advance by themselves later (not yet started, or running to completion), and the requests
//! of the unfinished pods on each node.
//!
//! Every answer is derived from the stored pods, so the index holds, per pod, what that pod
//! contributed; [`PodIndex::update`] takes the pod's old contribution back and adds its current
//! one. [`super::state::SimState`] calls it for each pod it changed (the keys it marks) and
//! each pod it removed, and rebuilds the index after changes that concern every pod (nodes
//! reshaped, a restore). Without it a reconcile after one apply scanned every object several
//! times: applying N workloads cost O(N²).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use std::time::Duration;

use super::placement::{NodeUsage, PODS};
use super::state::{Entry, Node};
use super::ObjectKey;
use flotilla_api::quantity::Quantity;

/// What one pod adds to the index.
#[derive(Clone, Debug, Default, PartialEq)]
struct Contribution {
    owner: Option<ObjectKey>,
    /// Its creation sequence, while it waits for a node.
    pending: Option<u64>,
    /// It will advance by itself later.
    unsettled: bool,
    /// The node it counts on, and its requests there in millis (`pods` counting it).
    usage: Option<(usize, Vec<(String, i128)>)>,
}

/// The sim's pod lookups; see the module doc.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodIndex {
    contributions: HashMap<ObjectKey, Contribution>,
    by_owner: HashMap<ObjectKey, BTreeSet<ObjectKey>>,
    pending: BTreeSet<(u64, ObjectKey)>,
    unsettled: BTreeSet<ObjectKey>,
    /// Per node (in node order): resource → millis requested by the unfinished pods on it,
    /// and how many pods name it.
    used: Vec<BTreeMap<String, (i128, usize)>>,
    /// Node name → its position.
    node_positions: HashMap<String, usize>,
}

impl PodIndex {
    /// The index of `objects` on `nodes`.
    pub fn build<'a>(
        objects: impl IntoIterator<Item = (&'a ObjectKey, &'a Entry)>,
        nodes: &[Node],
        timing: (Duration, Duration),
    ) -> Self {
        let mut index = PodIndex {
            used: vec![BTreeMap::new(); nodes.len()],
            node_positions: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
            ..PodIndex::default()
        };
        for (key, entry) in objects {
            index.update(key, Some(entry), timing);
        }
        index
    }

    /// Replaces what the object at `key` contributes by what `entry` (its current state;
    /// `None` when it is gone) contributes. `timing` is the sim's (startup delay, job run time).
    pub fn update(&mut self, key: &ObjectKey, entry: Option<&Entry>, timing: (Duration, Duration)) {
        let new = entry.and_then(|e| self.contribution(e, timing));
        if self.contributions.get(key) == new.as_ref() {
            return;
        }
        if let Some(old) = self.contributions.remove(key) {
            self.take_back(key, old);
        }
        if let Some(new) = new {
            self.add(key, &new);
            self.contributions.insert(key.clone(), new);
        }
    }

    fn contribution(&self, entry: &Entry, timing: (Duration, Duration)) -> Option<Contribution> {
        let pod = entry.pod.as_ref()?;
        let usage = match (&pod.node, pod.finished()) {
            (Some(node), false) => self.node_positions.get(node).map(|i| {
                // As `with_pod_count`: a pod counts as one `pods`, whatever it requests.
                let mut millis: Vec<(String, i128)> = pod
                    .requests
                    .iter()
                    .filter(|(n, _)| n.as_str() != PODS)
                    .map(|(n, q)| (n.clone(), q.milli_value()))
                    .collect();
                millis.push((PODS.to_string(), 1000));
                (*i, millis)
            }),
            _ => None,
        };
        Some(Contribution {
            owner: pod.owner.clone(),
            pending: (pod.node.is_none() && !pod.finished()).then_some(pod.seq),
            unsettled: pod.next_due(timing.0, timing.1).is_some(),
            usage,
        })
    }

    fn add(&mut self, key: &ObjectKey, c: &Contribution) {
        if let Some(owner) = &c.owner {
            self.by_owner
                .entry(owner.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(seq) = c.pending {
            self.pending.insert((seq, key.clone()));
        }
        if c.unsettled {
            self.unsettled.insert(key.clone());
        }
        if let Some((node, millis)) = &c.usage {
            let sums = &mut self.used[*node];
            for (name, m) in millis {
                let (sum, pods) = sums.entry(name.clone()).or_default();
                *sum = sum.saturating_add(*m);
                *pods += 1;
            }
        }
    }

    fn take_back(&mut self, key: &ObjectKey, c: Contribution) {
        if let Some(owner) = &c.owner {
            if let Some(pods) = self.by_owner.get_mut(owner) {
                pods.remove(key);
                if pods.is_empty() {
                    self.by_owner.remove(owner);
                }
            }
        }
        if let Some(seq) = c.pending {
            self.pending.remove(&(seq, key.clone()));
        }
        if c.unsettled {
            self.unsettled.remove(key);
        }
        if let Some((node, millis)) = c.usage {
            let sums = &mut self.used[node];
            for (name, m) in millis {
                if let Some((sum, pods)) = sums.get_mut(&name) {
                    *sum = sum.saturating_sub(m);
                    *pods = pods.saturating_sub(1);
                    if *pods == 0 {
                        sums.remove(&name);
                    }
                }
            }
        }
    }

    /// The pods `owner` owns.
    pub fn owned_by(&self, owner: &ObjectKey) -> impl Iterator<Item = &ObjectKey> {
        self.by_owner.get(owner).into_iter().flatten()
    }

    /// The pods waiting for a node that were created after the pod of sequence number `seq`
    /// (all of them for `None`), oldest first, with their sequence numbers.
    pub fn pending_after(&self, seq: Option<u64>) -> impl Iterator<Item = (u64, &ObjectKey)> {
        let first = ObjectKey {
            group: String::new(),
            kind: String::new(),
            namespace: String::new(),
            name: String::new(),
        };
        let from = seq.map_or(0, |s| s.saturating_add(1));
        self.pending.range((from, first)..).map(|(s, k)| (*s, k))
    }

    /// True when no pod waits for a node.
    pub fn nothing_pending(&self) -> bool {
        self.pending.is_empty()
    }

    /// The pods that will advance by themselves later.
    pub fn unsettled(&self) -> &BTreeSet<ObjectKey> {
        &self.unsettled
    }

    /// Each node's allocatable and what its unfinished pods request.
    pub fn usage(&self, nodes: &[Node]) -> Vec<NodeUsage> {
        nodes
            .iter()
            .zip(&self.used)
            .map(|(n, sums)| NodeUsage {
                name: n.name.clone(),
                allocatable: n.allocatable.clone(),
                unschedulable: n.unschedulable,
                used: sums
                    .iter()
                    .map(|(name, (milli, _))| (name.clone(), Quantity::from_milli(*milli)))
                    .collect(),
            })
            .collect()
    }

    /// The earliest time an unsettled pod advances by itself.
    pub fn next_due<'a>(
        &self,
        objects: impl Fn(&ObjectKey) -> Option<&'a Entry>,
        timing: (Duration, Duration),
    ) -> Option<DateTime<Utc>> {
        self.unsettled
            .iter()
            .filter_map(|k| objects(k)?.pod.as_ref()?.next_due(timing.0, timing.1))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::pods::PodSim;
    use flotilla_api::quantity::ResourceList;
    use serde_json::json;

    const TIMING: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(60));

    fn key(name: &str, kind: &str) -> ObjectKey {
        ObjectKey {
            group: if kind == "Pod" { "" } else { "apps" }.into(),
            kind: kind.into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn node(name: &str) -> Node {
        Node {
            name: name.into(),
            allocatable: ResourceList::new(),
            unschedulable: false,
        }
    }

    fn pod(seq: u64, owner: &str, cpu: &str) -> Entry {
        let mut requests = ResourceList::new();
        requests.insert("cpu".into(), Quantity::parse(cpu).unwrap());
        let mut p = PodSim::new(seq, requests, Utc::now());
        p.owner = Some(key(owner, "Deployment"));
        Entry {
            object: json!({"kind": "Pod"}),
            status_override: None,
            pod: Some(p),
        }
    }

    fn used(index: &PodIndex, nodes: &[Node], at: usize) -> Vec<(String, String)> {
        index.usage(nodes)[at]
            .used
            .iter()
            .map(|(k, q)| (k.clone(), q.to_string()))
            .collect()
    }

    #[test]
    fn a_pod_moves_through_the_index_as_it_is_placed_started_and_removed() {
        let nodes = [node("n0"), node("n1")];
        let (a, b) = (key("a", "Pod"), key("b", "Pod"));
        let mut objects = BTreeMap::new();
        objects.insert(a.clone(), pod(2, "web", "500m"));
        objects.insert(b.clone(), pod(1, "web", "250m"));
        objects.insert(
            key("web", "Deployment"),
            Entry {
                object: json!({"kind": "Deployment"}),
                status_override: None,
                pod: None,
            },
        );
        let mut index = PodIndex::build(&objects, &nodes, TIMING);
        let owned: Vec<_> = index.owned_by(&key("web", "Deployment")).collect();
        assert_eq!(owned, [&a, &b]);
        // Pending oldest first; nothing counts on a node yet, nothing advances by itself.
        assert_eq!(
            index
                .pending_after(None)
                .map(|(_, k)| k)
                .collect::<Vec<_>>(),
            [&b, &a]
        );
        assert!(index.unsettled().is_empty());
        assert!(used(&index, &nodes, 1).is_empty());

        // Placed on n1: no longer pending, counted there, due to start.
        let now = Utc::now();
        if let Some(p) = objects.get_mut(&a).and_then(|e| e.pod.as_mut()) {
            p.node = Some("n1".into());
            p.scheduled_at = Some(now);
        }
        index.update(&a, objects.get(&a), TIMING);
        assert_eq!(
            index
                .pending_after(None)
                .map(|(_, k)| k)
                .collect::<Vec<_>>(),
            [&b]
        );
        assert_eq!(
            used(&index, &nodes, 1),
            [("cpu".into(), "500m".into()), ("pods".into(), "1".into())]
        );
        assert_eq!(index.unsettled().iter().collect::<Vec<_>>(), [&a]);
        let due = index.next_due(|k| objects.get(k), TIMING);
        assert_eq!(due, Some(now + chrono::Duration::seconds(5)));

        // Started: settled, still counted.
        if let Some(p) = objects.get_mut(&a).and_then(|e| e.pod.as_mut()) {
            p.advance(now + chrono::Duration::seconds(5), TIMING.0, TIMING.1);
        }
        index.update(&a, objects.get(&a), TIMING);
        assert!(index.unsettled().is_empty());
        assert_eq!(index.next_due(|k| objects.get(k), TIMING), None);

        // Removed: nothing of it is left, and the index is what a fresh build gives.
        objects.remove(&a);
        index.update(&a, None, TIMING);
        assert!(used(&index, &nodes, 1).is_empty());
        assert_eq!(
            index
                .owned_by(&key("web", "Deployment"))
                .collect::<Vec<_>>(),
            [&b]
        );
        assert_eq!(index, PodIndex::build(&objects, &nodes, TIMING));
    }
}
